"""The real-time server: Moshi's WebSocket protocol, many live sessions on one 80 ms ticker."""
