"""The parent side of the Listener process: start it, feed it audio, route its events to sessions.

Feeding never blocks the frame loop (a multiprocessing queue pickles and sends from its own
thread); events come back on a reader thread and are handed to each session's callback.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import threading
import time
from typing import Any, Callable

import numpy as np

from ..errors import BackendUnavailable
from .worker import ListenerConfig, run_worker

log = logging.getLogger(__name__)

EventCallback = Callable[[dict[str, Any]], None]


class ListenerProcess:
    def __init__(self, config: ListenerConfig = ListenerConfig()) -> None:
        self.config = config
        ctx = mp.get_context("spawn")  # never fork a process that may hold threads or an event loop
        self._inbox = ctx.Queue()
        self._outbox = ctx.Queue()
        self._proc = ctx.Process(target=run_worker, args=(self._inbox, self._outbox, config),
                                 name="tandem-listener", daemon=True)
        self._callbacks: dict[str, EventCallback] = {}
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._started = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def start(self, timeout_s: float = 120.0) -> "ListenerProcess":
        self._proc.start()
        self._started = True
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = self._outbox.get(timeout=0.5)
            except Exception:  # noqa: BLE001 - queue.Empty from a multiprocessing queue
                msg = None
            if msg and msg.get("kind") == "ready":
                break
            if msg and msg.get("kind") == "fatal":
                self.stop()
                raise BackendUnavailable(msg["error"])
            if not self._proc.is_alive():
                raise BackendUnavailable(f"Listener process exited at start-up (code {self._proc.exitcode})")
            if time.monotonic() > deadline:
                self.stop()
                raise BackendUnavailable(f"Listener did not load within {timeout_s:.0f} s")
        self._reader = threading.Thread(target=self._read, name="listener-reader", daemon=True)
        self._reader.start()
        log.info("Listener ready (pid %s)", self._proc.pid)
        return self

    def open(self, sid: str, callback: EventCallback) -> None:
        with self._lock:
            self._callbacks[sid] = callback
        self._inbox.put(("open", sid))

    def feed(self, sid: str, frame: np.ndarray) -> None:
        self._inbox.put(("audio", sid, np.asarray(frame, dtype=np.float32)))

    def close(self, sid: str) -> None:
        with self._lock:
            self._callbacks.pop(sid, None)
        if self._started:
            self._inbox.put(("close", sid))

    def _read(self) -> None:
        while True:
            try:
                msg = self._outbox.get()
            except (EOFError, OSError):
                return
            if msg is None:
                return
            with self._lock:
                cb = self._callbacks.get(msg.get("sid"))
            if cb is not None:
                cb(msg)
            elif msg.get("kind") in ("error", "fatal"):
                log.error("Listener: %s", msg.get("error"))

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        try:
            self._inbox.put(("stop",))
            self._proc.join(timeout=3)
        finally:
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=3)
            self._outbox.put(None)  # wake the reader so it ends
            if self._reader is not None:
                self._reader.join(timeout=2)
            for q in (self._inbox, self._outbox):
                q.close()
                q.join_thread()

    def __enter__(self) -> "ListenerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
