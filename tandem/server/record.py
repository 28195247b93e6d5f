"""`tandem serve --record DIR`: each session as a stereo wav (user left, assistant right, aligned
as `tandem run` aligns them) and its timeline, flushed as they go.

Every second the wav's data and header are flushed and the timeline's new events and frames are
appended to a JSON-lines file, so a crash loses at most the last second. When the session ends,
the whole timeline is also written as one JSON file (docs/TIMELINE.md).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO

import numpy as np
import soundfile as sf

from ..audio import FRAME_SAMPLES, SAMPLE_RATE
from ..timeline import Timeline

FLUSH_EVERY_FRAMES = 12  # just under a second


class Recorder:
    def __init__(self, directory: Path, sid: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        stem = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{sid}"
        self.wav_path = directory / f"{stem}.wav"
        self.jsonl_path = directory / f"{stem}.timeline.jsonl"
        self.json_path = directory / f"{stem}.timeline.json"
        self._wav = sf.SoundFile(str(self.wav_path), "w", SAMPLE_RATE, 2, "PCM_16")
        self._jsonl: IO[str] = self.jsonl_path.open("w", encoding="utf-8")
        self._prev_out = np.zeros(FRAME_SAMPLES, np.float32)  # step k's output plays in frame k + 1
        self._frames = 0
        self._events_written = 0
        self._frames_written = 0
        self.closed = False

    def frame(self, user: np.ndarray, assistant_out: np.ndarray, timeline: Timeline) -> None:
        """Frame k: the user's input frame k and the output of step k (played in frame k + 1)."""
        block = np.stack([user, self._prev_out], axis=1)
        self._wav.write(np.clip(block, -1.0, 1.0))
        self._prev_out = np.asarray(assistant_out, np.float32)
        self._frames += 1
        if self._frames % FLUSH_EVERY_FRAMES == 0:
            self.flush(timeline)

    def flush(self, timeline: Timeline) -> None:
        self._wav.flush()
        for ev in timeline.events[self._events_written:]:
            self._jsonl.write(json.dumps({"event": ev}, ensure_ascii=False) + "\n")
        self._events_written = len(timeline.events)
        for k in range(self._frames_written, len(timeline.frame_t)):
            self._jsonl.write(json.dumps({"frame": k, "t": timeline.frame_t[k], "late_ms": timeline.frame_late_ms[k],
                                          "step_ms": timeline.frame_step_ms[k], "oracle_token": timeline.frame_oracle[k],
                                          "text": timeline.frame_text[k]}, ensure_ascii=False) + "\n")
        self._frames_written = len(timeline.frame_t)
        self._jsonl.flush()

    def close(self, timeline: Timeline) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.flush(timeline)
            timeline.save(self.json_path)
        finally:
            self._wav.close()
            self._jsonl.close()
