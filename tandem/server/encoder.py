"""The Opus encoder thread: every session's output frame, encoded beside the ticker, not in it."""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)


class Listening(Protocol):
    """What the encoder needs of a client (server/connection.py's Client): its Opus writer, whether it is
    going, and where the page goes on the event loop."""

    sid: str
    closing: bool
    writer: object

    def deliver(self, page: bytes, msgs: list[bytes]) -> None: ...


class OutputEncoder:
    """Opus-encodes every session's output frame on a thread of its own, in tick order, and hands each
    page back to the event loop for sending. sphn gives up the GIL while it encodes, so the encoding
    (about a third of a tick's work with 8 sessions) runs beside the ticker instead of inside it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._q: queue.SimpleQueue[tuple[Listening, np.ndarray, list[bytes]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="opus-out", daemon=True)
        self._thread.start()

    def encode(self, client: Listening, audio: np.ndarray, msgs: list[bytes]) -> None:
        self._q.put((client, audio, msgs))

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            client, audio, msgs = item
            if client.closing:
                continue
            try:
                page = client.writer.append_pcm(audio)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a bad frame must not stop every session's audio
                log.exception("Opus encoding failed for %s", client.sid)
                page = b""
            try:
                self._loop.call_soon_threadsafe(client.deliver, page, msgs)
            except RuntimeError:  # the loop is closed: the server is gone
                return

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=2)
