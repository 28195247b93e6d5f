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

from ..runtime.children import ProcessPart, describe_exit
from ..runtime.errors import BackendUnavailable

log = logging.getLogger(__name__)


def _worker(conn, voice: str, threads: int) -> None:  # noqa: ANN001
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # die with the server
    except OSError:
        pass
    try:
        from ..speak.tts import HibariTTS

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


class ProcessTTS(ProcessPart):
    """A TTS (`synthesize(text) -> float32 audio`) whose engine runs in a child process.

    Requests are served one at a time and each waits at most `timeout_s` (plus a little per
    character) for its audio: a voice that hangs is killed, so it cannot hold the lock that every
    session's voice thread shares; the supervisor then starts it again (`restart`)."""

    name = "voice"
    repeatable = True  # hibari, seeded: the Voicer may cache short segments (tandem/speak/tts.py)

    def __init__(self, voice: str = "heart", threads: int = 1, start_timeout_s: float = 120.0,
                 timeout_s: float = 5.0) -> None:
        self.voice = voice
        self.threads = threads
        self.start_timeout_s = start_timeout_s
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._closed = False
        self.timeouts = 0
        self._conn, self._proc = self._spawn()

    def _spawn(self):  # noqa: ANN202 - (connection, process), started and ready
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, self.voice, self.threads), name="tandem-voice", daemon=True)
        proc.start()
        child.close()
        try:
            if not conn.poll(self.start_timeout_s):
                raise BackendUnavailable(f"the voice process did not start within {self.start_timeout_s:.0f} s")
            kind, value = conn.recv()
        except (EOFError, OSError):
            proc.join(timeout=3)
            conn.close()
            raise BackendUnavailable(f"the voice process {describe_exit(proc.exitcode)} at start-up") from None
        except BackendUnavailable:
            _kill(proc)
            conn.close()
            raise
        if kind != "ready":
            _kill(proc)
            conn.close()
            raise BackendUnavailable(str(value))
        self.sample_rate = int(value)
        return conn, proc

    def synthesize(self, text: str) -> np.ndarray:
        with self._lock:
            if not self._proc.is_alive():
                raise RuntimeError(f"the voice process {describe_exit(self._proc.exitcode)}")
            t0 = time.perf_counter()
            limit = self.timeout_s + 0.02 * len(text)
            try:
                self._conn.send(text)
                ready = self._conn.poll(limit)
                reply = self._conn.recv() if ready else None
            except (EOFError, OSError) as e:
                raise RuntimeError(f"the voice process {describe_exit(self._proc.exitcode)}") from e
            if reply is None:
                # hung: kill it rather than let every session wait behind it; the supervisor restarts it
                self.timeouts += 1
                _kill(self._proc)
                raise TimeoutError(f"the voice gave no audio within {limit:.1f} s; it was killed and will be restarted")
        kind, value = reply
        if kind != "ok":
            raise RuntimeError(f"the voice failed: {value}")
        log.debug("voice: %r in %.0f ms", text[:40], (time.perf_counter() - t0) * 1e3)
        return value

    # -- supervision (tandem.runtime.children.Part) --------------------------------------------------------
    def restart(self) -> None:
        if self._closed:
            raise BackendUnavailable("the voice was stopped")
        conn, proc = self._spawn()  # outside the lock: sessions fail fast meanwhile instead of queueing
        with self._lock:
            old_conn, self._conn, self._proc = self._conn, conn, proc
            closed = self._closed
        old_conn.close()
        if closed:
            self.close()

    def close(self) -> None:
        self._closed = True
        try:
            if self._proc.is_alive():
                with self._lock:
                    self._conn.send(None)
                self._proc.join(timeout=3)
        except (OSError, BrokenPipeError):
            pass
        finally:
            _kill(self._proc)
            self._conn.close()

    def __enter__(self) -> "ProcessTTS":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _kill(proc) -> None:  # noqa: ANN001
    if proc.is_alive():
        proc.kill()
    proc.join(timeout=3)
