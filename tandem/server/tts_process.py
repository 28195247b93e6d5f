"""The voice in a process of its own, shared by every session of the server.

hibari's text front-end is Python: synthesizing in a thread of the server holds the GIL in short
bursts, and the ticker, whose torch ops give up the GIL at every op, then waits for it again and
again (measured: the batched step of 6 sessions went from 9 to 14 ms median, 20 to 33 ms p99).
In its own process the voice only costs the server a pipe round trip. Sessions' voice threads
call `synthesize` as before; requests are served one at a time, in arrival order.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import threading
import time

import numpy as np

from ..errors import BackendUnavailable

log = logging.getLogger(__name__)


def _worker(conn, voice: str, threads: int) -> None:  # noqa: ANN001
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # die with the server
    except OSError:
        pass
    try:
        from ..tts import HibariTTS

        tts = HibariTTS(voice=voice, threads=threads)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which owns the user-facing error
        conn.send(("fatal", f"the voice could not be loaded: {e}"))
        return
    conn.send(("ready", tts.sample_rate))
    while True:
        try:
            text = conn.recv()
        except (EOFError, OSError):
            return
        if text is None:
            return
        try:
            audio = np.asarray(tts.synthesize(text), np.float32)
            conn.send(("ok", audio))
        except Exception as e:  # noqa: BLE001 - one bad sentence must not end the voice
            conn.send(("error", f"{type(e).__name__}: {e}"))


class ProcessTTS:
    """A TTS (`synthesize(text) -> float32 audio`) whose engine runs in a child process."""

    def __init__(self, voice: str = "heart", threads: int = 1, start_timeout_s: float = 120.0) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker, args=(child, voice, threads), name="tandem-voice", daemon=True)
        self._proc.start()
        child.close()
        self._lock = threading.Lock()
        if not self._conn.poll(start_timeout_s):
            self.close()
            raise BackendUnavailable(f"the voice process did not start within {start_timeout_s:.0f} s")
        kind, value = self._conn.recv()
        if kind != "ready":
            self.close()
            raise BackendUnavailable(str(value))
        self.sample_rate = int(value)

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def synthesize(self, text: str) -> np.ndarray:
        with self._lock:
            if not self._proc.is_alive():
                raise RuntimeError("the voice process is not running")
            t0 = time.perf_counter()
            self._conn.send(text)
            kind, value = self._conn.recv()
        if kind != "ok":
            raise RuntimeError(f"the voice failed: {value}")
        log.debug("voice: %r in %.0f ms", text[:40], (time.perf_counter() - t0) * 1e3)
        return value

    def close(self) -> None:
        try:
            if self._proc.is_alive():
                with self._lock:
                    self._conn.send(None)
                self._proc.join(timeout=3)
        except (OSError, BrokenPipeError):
            pass
        finally:
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=3)
            self._conn.close()

    def __enter__(self) -> "ProcessTTS":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
