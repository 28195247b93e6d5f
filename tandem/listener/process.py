"""The parent side of the Listener process: start it, feed it audio, route its events to sessions.

Feeding never blocks the frame loop: a multiprocessing queue pickles and sends from its own thread,
and the queue is bounded (`feed_limit` messages): when the Listener falls that far behind, or has
died, a frame is dropped and counted instead of piling up in memory. Events come back on a reader
thread and are handed to each session's callback.

A Listener that dies is restarted by the supervisor (`restart`): a new process with new queues,
every open stream opened again where its audio clock stood, so event times stay on the session's
clock; the audio sent while it was down is lost.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import threading
import time
from typing import Any, Callable

import numpy as np

from ..runtime.children import ProcessPart, describe_exit
from ..runtime.errors import BackendUnavailable
from .vad import SAMPLE_RATE
from .worker import IN_RATE, ListenerConfig, run_worker

log = logging.getLogger(__name__)

EventCallback = Callable[[dict[str, Any]], None]

# 1500 frames: 10 s of audio for 12 sessions, far beyond a Whisper decode (~0.6 s) holding up the worker
FEED_LIMIT = 1500


class ListenerProcess(ProcessPart):
    name = "Listener"

    def __init__(self, config: ListenerConfig = ListenerConfig(), feed_limit: int = FEED_LIMIT,
                 start_timeout_s: float = 120.0) -> None:
        self.config = config
        self.feed_limit = feed_limit
        self.start_timeout_s = start_timeout_s
        self._ctx = mp.get_context("spawn")  # never fork a process that may hold threads or an event loop
        self._callbacks: dict[str, EventCallback] = {}
        self._fed: dict[str, int] = {}  # 24 kHz samples fed per stream: its audio clock, kept across restarts
        self._contexts: dict[str, str] = {}  # per stream, the user's earlier turns (set_context)
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._started = False
        self._closed = False
        self.dropped_frames = 0
        self._last_drop_log = 0.0
        self._inbox, self._outbox, self._proc = self._make()

    def _make(self):  # noqa: ANN202 - (inbox, outbox, process)
        inbox = self._ctx.Queue(maxsize=self.feed_limit)
        outbox = self._ctx.Queue()
        proc = self._ctx.Process(target=run_worker, args=(inbox, outbox, self.config), name="tandem-listener",
                                 daemon=True)
        return inbox, outbox, proc

    def _wait_ready(self, proc, outbox) -> None:  # noqa: ANN001
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                msg = outbox.get(timeout=0.5)
            except queue.Empty:
                msg = None
            if msg and msg.get("kind") == "ready":
                return
            if msg and msg.get("kind") == "fatal":
                raise BackendUnavailable(msg["error"])
            if not proc.is_alive():
                raise BackendUnavailable(f"the Listener process {describe_exit(proc.exitcode)} at start-up")
            if self._closed:
                raise BackendUnavailable("the Listener was stopped while starting")
            if time.monotonic() > deadline:
                raise BackendUnavailable(f"the Listener did not load within {self.start_timeout_s:.0f} s")

    def start(self) -> "ListenerProcess":
        self._proc.start()
        self._started = True
        try:
            self._wait_ready(self._proc, self._outbox)
        except BaseException:
            self.stop()
            raise
        self._reader = self._start_reader(self._outbox)
        log.info("Listener ready (pid %s)", self._proc.pid)
        return self

    def _start_reader(self, outbox) -> threading.Thread:  # noqa: ANN001
        t = threading.Thread(target=self._read, args=(outbox,), name="listener-reader", daemon=True)
        t.start()
        return t

    def open(self, sid: str, callback: EventCallback) -> None:
        with self._lock:
            self._callbacks[sid] = callback
            self._fed[sid] = 0
            self._put(("open", sid))

    def feed(self, sid: str, frame: np.ndarray) -> None:
        frame = np.asarray(frame, dtype=np.float32)
        with self._lock:
            if sid in self._fed:
                self._fed[sid] += len(frame)
            try:
                self._inbox.put_nowait(("audio", sid, frame))
            except queue.Full:
                self._dropped()

    def _dropped(self) -> None:
        self.dropped_frames += 1
        now = time.monotonic()
        if now - self._last_drop_log > 5.0:
            self._last_drop_log = now
            log.warning("the Listener is %d messages behind (or down): audio frames are dropped (%d so far)",
                        self.feed_limit, self.dropped_frames)

    def set_context(self, sid: str, text: str) -> None:
        """What the user said before in this stream (their earlier turns): Whisper hears the next turns
        in its light."""
        with self._lock:
            if sid not in self._fed:
                return
            self._contexts[sid] = text
            try:  # called from the frame loop: never wait on a full queue (it is sent again on a restart)
                self._inbox.put_nowait(("context", sid, text))
            except queue.Full:
                log.info("the Listener's queue is full: stream %s keeps its earlier context for now", sid)

    def close(self, sid: str) -> None:
        with self._lock:
            self._callbacks.pop(sid, None)
            self._fed.pop(sid, None)
            self._contexts.pop(sid, None)
            if self._started:
                self._put(("close", sid))

    def _put(self, msg: tuple) -> None:
        """A control message: it must not be lost to a full queue of audio while the worker lives."""
        try:
            self._inbox.put(msg, timeout=1.0)
        except queue.Full:
            log.warning("the Listener did not take a %r message within 1 s", msg[0])

    def _read(self, outbox) -> None:  # noqa: ANN001
        while True:
            try:
                msg = outbox.get()
            except (EOFError, OSError, ValueError, TypeError):  # the queue was closed under it
                return
            if msg is None:
                return
            with self._lock:
                cb = self._callbacks.get(msg.get("sid"))
            if cb is not None:
                cb(msg)
            elif msg.get("kind") in ("error", "fatal"):
                log.error("Listener: %s", msg.get("error"))

    # -- supervision (tandem.runtime.children.Part) --------------------------------------------------------
    def restart(self) -> None:
        if self._closed:
            raise BackendUnavailable("the Listener was stopped")
        inbox, outbox, proc = self._make()
        proc.start()
        try:
            self._wait_ready(proc, outbox)
        except BaseException:
            _end(proc, inbox, outbox)
            raise
        with self._lock:
            if self._closed:
                _end(proc, inbox, outbox)
                raise BackendUnavailable("the Listener was stopped while restarting")
            old = (self._proc, self._inbox, self._outbox)
            for sid, n in self._fed.items():  # each stream goes on where its audio clock stands
                inbox.put(("open", sid, n * SAMPLE_RATE // IN_RATE))
                if self._contexts.get(sid):
                    inbox.put(("context", sid, self._contexts[sid]))
            self._inbox, self._outbox, self._proc = inbox, outbox, proc
        old_reader, self._reader = self._reader, self._start_reader(outbox)
        old[2].put(None)  # the old reader ends before its queue is closed under it
        if old_reader is not None:
            old_reader.join(timeout=2)
        _end(old[0], old[1], old[2])
        log.info("Listener restarted (pid %s), %d streams reopened", proc.pid, len(self._fed))

    def stop(self) -> None:
        self._closed = True
        if not self._started:
            return
        self._started = False
        try:
            try:
                self._inbox.put(("stop",), timeout=0.5)
            except (queue.Full, ValueError, OSError):
                pass
            self._proc.join(timeout=3)
        finally:
            self._outbox.put(None)  # wake the reader so it ends
            if self._reader is not None:
                self._reader.join(timeout=2)
            _end(self._proc, self._inbox, self._outbox)

    def __enter__(self) -> "ListenerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _end(proc, inbox, outbox) -> None:  # noqa: ANN001
    """Make sure the process is gone and its queues' feeder threads cannot hang the interpreter."""
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout=3)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=3)
    for q in (inbox, outbox):
        q.cancel_join_thread()  # a dead reader never drains it: joining its feeder would hang
        q.close()
