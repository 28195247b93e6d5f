"""The Listener: voice activity and streaming speech-to-text, in a process of its own."""
