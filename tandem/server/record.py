"""`tandem serve --record DIR`: each session as a stereo wav (user left, assistant right, aligned
as `tandem run` aligns them) and its timeline, flushed as they go.

Every second the wav's data and header are flushed and the timeline's new events and frames are
appended to a JSON-lines file, so a crash loses at most the last second. When the session ends,
the whole timeline is also written as one JSON file (docs/TIMELINE.md).

No disk I/O runs in the 80 ms tick: `frame()` (called by the ticker) only hands the frame's samples
and, about every second, the timeline's new rows to a bounded queue served by a writer thread, so a
slow or stalled disk delays the recording, never the sessions. When the queue is full (the disk has
fallen about 20 s behind) the item is dropped and counted instead of waited for: a dropped audio
frame is written as silence once the writer catches up, so the wav stays aligned with the timeline,
and dropped timeline rows go out with the next flush. `close()` writes everything still queued.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import soundfile as sf

from ..audio.frames import FRAME_SAMPLES, SAMPLE_RATE
from ..record.timeline import Timeline

log = logging.getLogger(__name__)

FLUSH_EVERY_FRAMES = 12  # just under a second
MAX_QUEUED = 256  # queue items (about 20 s of frames) a stalled disk may hold back before frames are dropped


@dataclass
class _Audio:
    block: np.ndarray | None  # (FRAME_SAMPLES, 2) float32, owned by the writer; None: only the gap
    gap: int  # frames dropped just before this one: written as silence first


class Recorder:
    def __init__(self, directory: Path, sid: str, max_queued: int = MAX_QUEUED) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        stem = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{sid}"
        self.wav_path = directory / f"{stem}.wav"
        self.jsonl_path = directory / f"{stem}.timeline.jsonl"
        self.json_path = directory / f"{stem}.timeline.json"
        self._wav = sf.SoundFile(str(self.wav_path), "w", SAMPLE_RATE, 2, "PCM_16")
        self._jsonl: IO[str] = self.jsonl_path.open("w", encoding="utf-8")
        self._prev_out = np.zeros(FRAME_SAMPLES, np.float32)  # step k's output plays in frame k + 1
        self._frames = 0
        self._events_sent = 0  # timeline rows handed to the writer so far
        self._frames_sent = 0
        self._gap = 0  # audio frames dropped since the last one queued
        self.dropped_frames = 0  # audio frames the full queue turned away (written as silence)
        self.dropped_flushes = 0  # timeline flushes turned away (their rows went with a later one)
        self.closed = False
        self._close_lock = threading.Lock()  # the hub's shutdown and a leaving client may both close
        self._write_failed = False
        self._q: queue.Queue[_Audio | list[dict[str, Any]] | None] = queue.Queue(maxsize=max_queued)
        self._thread = threading.Thread(target=self._run, name=f"record-{sid}", daemon=True)
        self._thread.start()

    # -- on the ticker: never waits --------------------------------------------------------------
    def frame(self, user: np.ndarray, assistant_out: np.ndarray, timeline: Timeline) -> None:
        """Frame k: the user's input frame k and the output of step k (played in frame k + 1)."""
        if self.closed:
            return
        block = np.stack([user, self._prev_out], axis=1).astype(np.float32, copy=False)  # a copy the writer owns
        self._prev_out = np.array(assistant_out, np.float32)  # copied: a front-end may reuse its buffer
        self._frames += 1
        if self._put(_Audio(block, self._gap)):
            self._gap = 0
        else:
            self._gap += 1
            self.dropped_frames += 1
            if self.dropped_frames == 1:
                log.warning("recording %s: the disk is falling behind; dropping frames (recorded as silence)",
                            self.wav_path.name)
        if self._frames % FLUSH_EVERY_FRAMES == 0:
            self._queue_rows(timeline, block=False)

    def _put(self, item: _Audio | list[dict[str, Any]], block: bool = False) -> bool:
        try:
            self._q.put(item, block=block)
            return True
        except queue.Full:
            return False

    def _queue_rows(self, timeline: Timeline, block: bool) -> None:
        """Hand the timeline's new events and frame rows to the writer (which also flushes the files);
        they count as sent only once queued, so rows of a dropped flush go with the next one."""
        n_events, n_frames = len(timeline.events), len(timeline.frame_t)
        rows: list[dict[str, Any]] = [{"event": dict(ev)} for ev in timeline.events[self._events_sent:n_events]]
        rows += [{"frame": k, "t": timeline.frame_t[k], "late_ms": timeline.frame_late_ms[k],
                  "step_ms": timeline.frame_step_ms[k], "oracle_token": timeline.frame_oracle[k],
                  "text": timeline.frame_text[k]} for k in range(self._frames_sent, n_frames)]
        if self._put(rows, block):
            self._events_sent, self._frames_sent = n_events, n_frames
        else:
            self.dropped_flushes += 1

    # -- the writer thread -----------------------------------------------------------------------
    def _run(self) -> None:
        silence = np.zeros((FRAME_SAMPLES, 2), np.float32)
        while True:
            item = self._q.get()
            if item is None:
                return
            try:
                if isinstance(item, _Audio):
                    for _ in range(item.gap):
                        self._wav.write(silence)
                    if item.block is not None:
                        self._wav.write(np.clip(item.block, -1.0, 1.0))
                else:
                    for row in item:
                        self._jsonl.write(json.dumps(row, ensure_ascii=False) + "\n")
                    self._wav.flush()
                    self._jsonl.flush()
            except Exception:  # noqa: BLE001 - a failing disk costs the recording, never the session
                if not self._write_failed:
                    log.exception("recording %s: writing failed", self.wav_path.name)
                self._write_failed = True

    def close(self, timeline: Timeline) -> None:
        """Write everything still queued, the rest of the timeline and the timeline JSON. Blocks until
        the writer is done: call it off the event loop."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
            try:
                try:
                    if self._gap:
                        self._q.put(_Audio(None, self._gap))
                    self._queue_rows(timeline, block=True)
                finally:  # the writer must be done before its files are closed
                    self._q.put(None)
                    self._thread.join()
                timeline.save(self.json_path)
            finally:
                self._wav.close()
                self._jsonl.close()
            if self.dropped_frames or self.dropped_flushes:
                log.warning("recording %s: %d frames recorded as silence and %d flushes delayed: the disk fell behind",
                            self.wav_path.name, self.dropped_frames, self.dropped_flushes)
