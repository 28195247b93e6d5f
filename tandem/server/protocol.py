"""Moshi's WebSocket protocol (REFERENCE section 2) and this server's opt-in extension.

Every message is binary: one kind byte, then the payload. docs/PROTOCOL.md is the full description.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

HANDSHAKE = 0x00  # server -> client, once the session is ready (no payload)
AUDIO = 0x01  # both ways: Ogg-Opus pages, 24 kHz mono
TEXT = 0x02  # server -> client: UTF-8 text piece of the assistant as it is spoken
CONTROL = 0x03  # Moshi control messages: accepted and ignored
METADATA = 0x04  # Moshi metadata (JSON); server -> client: this server's events, only when asked for
ERROR = 0x05  # server -> client: UTF-8 error message
PING = 0x06  # accepted and ignored (keep-alive)

KNOWN_FROM_CLIENT = {AUDIO, CONTROL, METADATA, PING}


def handshake() -> bytes:
    return bytes([HANDSHAKE])


def audio(ogg: bytes) -> bytes:
    return bytes([AUDIO]) + ogg


def text(piece: str) -> bytes:
    return bytes([TEXT]) + piece.encode("utf-8")


def error(message: str) -> bytes:
    return bytes([ERROR]) + message.encode("utf-8")


def event(obj: dict[str, Any]) -> bytes:
    return bytes([METADATA]) + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Limits:
    """Per-connection limits. Generous for any real client (Moshi's sends 12.5 pages/s of about
    0.3-0.5 kB; a browser encoder up to 50 pages/s), tight enough that one client cannot flood
    the server."""
    max_message_bytes: int = 64 * 1024  # an Ogg page is at most ~64 kB; aiohttp closes with 1009 beyond
    max_messages_per_s: float = 100.0  # token bucket: sustained rate ...
    message_burst: int = 200  # ... and burst
    max_bytes_per_s: float = 64 * 1024.0
    byte_burst: int = 256 * 1024
    max_strikes: int = 20  # malformed messages (empty, unknown kind, text frames) tolerated before closing
    max_buffered_s: float = 1.0  # decoded input audio waiting for the ticker; older audio is dropped beyond
    input_keep_s: float = 0.08  # standing input lag kept (a frame: room for jitter); beyond it, pauses are skipped (< 0: never)
    idle_timeout_s: float = 60.0  # no audio message from the client for this long closes the session
    session_timeout_s: float = 3600.0  # total length of one session
    send_queue_messages: int = 400  # server -> client backlog (~10 s); a client that stops reading is closed


class TokenBucket:
    """Rate limit: `rate` units per second with bursts up to `burst`."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.level = burst
        self.t = now

    def take(self, amount: float, now: float) -> bool:
        self.level = min(self.burst, self.level + (now - self.t) * self.rate)
        self.t = now
        if amount > self.level:
            return False
        self.level -= amount
        return True
