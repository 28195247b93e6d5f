"""Replay a recorded session through a compact checkpoint, with no Listener, LLM or voice.

A timeline holds everything the front-end was given: the transcript the Listener had at each
frame (its partial and final events), the oracle text handed over at each frame (its oracle reset
and append events), and (timelines written since the `vad` frame field) the voice activity each
step saw. The oracle stream is rebuilt from that text with the replaying checkpoint's tokenizer
(a retrained checkpoint has its own) and the recorded or another oracle policy. For older timelines the voice activity is
recomputed from the session's input audio with the Listener's own VAD, one frame late as in a live
session. The oracle stream does not depend on what the front-end says, so stepping another
checkpoint on the same inputs shows what it would have said to the very same back-end.

This is how a real failure (a turn never taken, a garbled copy) is studied offline, and how a new
checkpoint is compared with the shipped one on real traces before a benchmark is run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ...bench.copying import copied_exactly, last_oracle_text
from ...audio.frames import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE, STT_SAMPLE_RATE, load_input, resample
from ...speak.frontend import FrontEndOutput, UserFrame, speaking
from ...think.oracle import DEFAULT_POLICY, OracleStream, make_policy
from ...record.timeline import LLM_ADOPT, LLM_KEEP, LLM_START, ORACLE_APPEND, ORACLE_END, ORACLE_RESET, ORACLE_SETTLED
from .frontend import CompactFrontEnd
from .tokenizer import END

VAD_LAG_FRAMES = 0  # a live step measures the frame it steps with (listener/frame_vad.py)


@dataclass
class ReplayInputs:
    transcripts: list[str]
    vad: list[float]
    oracle: list[int]
    speech_end_frame: int | None  # the frame in which the user's voice stopped (the VAD's last turn end)
    vad_source: str  # "timeline" or "audio"
    settled: list[bool] = field(default_factory=list)  # per frame: the oracle answered the final (`settled_frames`)
    upcoming: list[tuple[int, ...]] = field(default_factory=list)  # per frame: OracleStream.upcoming


@dataclass
class ReplayResult:
    name: str
    tokens: list[int]
    said: str
    turn_frame: int | None  # first frame with a word after the end of the user's speech
    recorded_said: str
    inputs: ReplayInputs = field(repr=False)
    pieces: list[tuple[int, str]] = field(default_factory=list)  # (frame, text) as handed to the voice; `said` joins them
    timeline: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def turn_frames_after_end(self) -> int | None:
        end = self.inputs.speech_end_frame
        return None if self.turn_frame is None or end is None else self.turn_frame - end


def vad_from_audio(samples_24k: np.ndarray, n_frames: int, lag: int = VAD_LAG_FRAMES) -> list[float]:
    """The per-frame voice activity a live session would have heard: Silero on 16 kHz audio, the highest
    window probability of each frame's chunk, `lag` frames late (1 for a session that took the Listener's
    report, `SessionConfig.frame_vad=False`)."""
    from ...listener.vad import VadSegmenter

    seg = VadSegmenter()
    audio16 = resample(samples_24k, SAMPLE_RATE, STT_SAMPLE_RATE)
    chunk = int(round(FRAME_SAMPLES * STT_SAMPLE_RATE / SAMPLE_RATE))
    per_frame: list[float] = []
    for k in range(n_frames):
        probs, _ = seg.feed(audio16[k * chunk:(k + 1) * chunk])
        per_frame.append(seg.chunk_prob(probs))
    return [0.0] * lag + per_frame[:max(0, n_frames - lag)]


def oracle_feed(tl: dict[str, Any], tokenizer, policy: str | None = None) -> tuple[list[int], list[tuple[int, ...]]]:
    """Per frame, the oracle token a session with `tokenizer` and `policy` (default: the recorded
    one) would have fed, from the recorded oracle events (all PAD when there were none), and the tokens
    the oracle held for the frames after it (OracleStream.upcoming)."""
    n = len(tl["frames"]["t"])
    stream = OracleStream(tokenizer.start_id, tokenizer.pad_id,
                          make_policy(policy or tl.get("meta", {}).get("oracle_policy") or DEFAULT_POLICY))
    by_frame: dict[int, list[dict[str, Any]]] = {}
    for e in tl["events"]:
        if e["kind"] in (ORACLE_RESET, ORACLE_APPEND, ORACLE_END):
            by_frame.setdefault(int(e["frame"]), []).append(e)
    out, upcoming = [], []
    for k in range(n):
        for e in by_frame.get(k, []):
            if e["kind"] == ORACLE_RESET:
                stream.reset(k)
            elif e["kind"] == ORACLE_END:
                stream.end(k)
            else:
                stream.append(tokenizer.encode(e["text"]), k)
        out.append(stream.token(k))
        upcoming.append(stream.upcoming(k))
    return out, upcoming


def settled_frames(tl: dict[str, Any], n: int) -> list[bool]:
    """Per frame, whether the oracle the front-end was fed answered the turn's final transcript
    (UserFrame.oracle_settled): from the ORACLE_SETTLED events, or, for a timeline recorded before them,
    worked out as the scheduler decides it: a final keeps the stream started on the same words (if that
    stream is the one adopted), or the stream it starts settles the oracle when it is adopted; a stream
    started on a partial unsettles it. The session applies what the scheduler decides at its next frame."""
    changes: list[tuple[int, bool]] = []
    events = tl["events"]
    if any(e["kind"] == ORACLE_SETTLED for e in events):
        changes = [(int(e["frame"]), bool(e["settled"])) for e in events if e["kind"] == ORACLE_SETTLED]
    else:
        final_pending, final_streams, adopted = False, set(), None
        for e in events:
            kind = e["kind"]
            if kind == "final" and e.get("text", "").strip():
                final_pending = True
            elif kind == LLM_START:
                if final_pending:
                    final_streams.add(e["stream"])
                final_pending = False
            elif kind == LLM_KEEP and e.get("reason", "").startswith("final"):
                final_pending = False
                changes.append((int(e["frame"]) + 1, e.get("stream") == adopted))
            elif kind == LLM_ADOPT:
                adopted = e["stream"]
                changes.append((int(e["frame"]) + 1, adopted in final_streams))
    out, now, i = [], False, 0
    for k in range(n):
        while i < len(changes) and changes[i][0] <= k:
            now = changes[i][1]
            i += 1
        out.append(now)
    return out


def inputs_from_timeline(tl: dict[str, Any], tokenizer, audio_path: str | Path | None = None,
                         policy: str | None = None, vad_lag: int | None = None) -> ReplayInputs:
    """`vad_lag`: measure the voice activity again from the input audio, this many frames late, rather
    than take the recorded one (to compare where the front-end hears the user stop, on the same oracles)."""
    frames = tl["frames"]
    times: list[float] = frames["t"]
    n = len(times)
    updates = sorted((e["t"], e["kind"], e.get("text", "")) for e in tl["events"] if e["kind"] in ("partial", "final"))
    transcripts, text, i = [], "", 0
    for t in times:
        while i < len(updates) and updates[i][0] <= t:
            _, kind, new = updates[i]
            if kind == "partial" or new.strip():  # as the session does: an empty final keeps the partial
                text = new
            i += 1
        transcripts.append(text)
    recorded = frames.get("vad") or []
    if vad_lag is None and len(recorded) == n and all(v >= 0 for v in recorded):
        vad, source = [float(v) for v in recorded], "timeline"
    else:
        path = audio_path or tl.get("meta", {}).get("input")
        if not path:
            raise ValueError("this timeline records no voice activity and names no input audio; pass the wav")
        lag = VAD_LAG_FRAMES if vad_lag is None else vad_lag
        vad, source = vad_from_audio(load_input(path, allow_silent=True).samples, n, lag), "audio"
    # the VAD's end event comes after its endpoint silence; `audio_s` is where the voice stopped
    ends = [e.get("audio_s", e["t"]) for e in tl["events"] if e["kind"] == "vad_end"]
    end_frame = int(round(ends[-1] / FRAME_S)) if ends else None
    oracle, upcoming = oracle_feed(tl, tokenizer, policy)
    return ReplayInputs(transcripts, vad, oracle, end_frame, source, settled_frames(tl, n), upcoming)


def replay(tl: dict[str, Any], front_end: CompactFrontEnd, name: str = "",
           audio_path: str | Path | None = None, policy: str | None = None,
           after_step: Callable[[int, FrontEndOutput], None] | None = None,
           vad_lag: int | None = None) -> ReplayResult:
    """Steps `front_end` (built without a voice) over the recorded inputs; deterministic.
    `after_step(frame, output)` sees each frame's output (a front-end built with a voice gives audio)."""
    inp = inputs_from_timeline(tl, front_end.tokenizer, audio_path, policy, vad_lag)
    front_end.reset()
    silent = np.zeros(FRAME_SAMPLES, np.float32)
    pieces: list[tuple[int, str]] = []
    turn = None
    with torch.inference_mode():
        for k, (tr, v, o, settled) in enumerate(zip(inp.transcripts, inp.vad, inp.oracle, inp.settled)):
            out = front_end.step(UserFrame(audio=silent, vad_prob=v, in_speech=speaking(v), transcript=tr,
                                           oracle_settled=settled, oracle_upcoming=inp.upcoming[k] if settled else None), o)
            pieces += [(k, text) for text in out.text]
            if after_step is not None:
                after_step(k, out)
            if turn is None and inp.speech_end_frame is not None and k >= inp.speech_end_frame \
                    and front_end.prev > END:
                turn = k
    tokens = list(front_end.emitted)
    recorded = " ".join(t for t in tl["frames"].get("text", []) if t)
    return ReplayResult(name=name, tokens=tokens, said=" ".join(text for _, text in pieces), turn_frame=turn,
                        recorded_said=recorded, inputs=inp, timeline=tl, pieces=pieces)


def said_answer(said: str, answers: list[str]) -> bool:
    """An accepted answer among the words the front-end said (text, not audio: no Whisper needed),
    matched as the benchmark matches transcribed words."""
    from ...bench.scoring import Word, find_answer, normalize

    words = [Word(w, float(i), float(i + 1)) for i, w in enumerate(normalize(said).split())]  # word positions as times
    return find_answer(words, answers) is not None


def answer_frame(r: ReplayResult, answers: list[str]) -> int | None:
    """The frame in which the text handed to the voice first held an accepted answer (None: never)."""
    for i, (k, _) in enumerate(r.pieces):
        if said_answer(" ".join(text for _, text in r.pieces[: i + 1]), answers):
            return k
    return None


def summarize(results: list[ReplayResult], answers: dict[str, list[str]]) -> dict[str, Any]:
    """Turns taken, how soon, and (where the question's answers are known) answers said."""
    ended = [r for r in results if r.inputs.speech_end_frame is not None]
    taken = [r.turn_frames_after_end for r in ended if r.turn_frames_after_end is not None]
    scored = [r for r in results if r.name in answers]
    exact = [v for v in (copied_exactly(r.said, last_oracle_text(r.timeline)) for r in results) if v is not None]
    frames = [(answer_frame(r, answers[r.name]), r.inputs.speech_end_frame) for r in scored]
    after = [k - end for k, end in frames if k is not None and end is not None]
    return {
        "timelines": len(results),
        "turns_taken": len(taken),
        "turns_missed": len(ended) - len(taken),
        "turn_frames_after_vad_end_median": float(np.median(taken)) if taken else None,
        "answers_said": sum(said_answer(r.said, answers[r.name]) for r in scored),
        "answers_scored": len(scored),
        # the frame the answer word went to the voice, after the frame the user's voice stopped
        "answer_frames_after_end_median": float(np.median(after)) if after else None,
        # the last oracle's names and numbers said as whole words in order (tandem/bench/copying.py)
        "copy_exact": sum(exact),
        "copy_judged": len(exact),
    }
