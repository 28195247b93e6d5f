"""`tandem bench --dialogues FILE`: multi-turn dialogues through the modes, the same audio through each.

Each dialogue becomes one user track (`render`): every turn spoken by a test voice, placed on the
track by its measured speech onset and end. A turn with `talk_over_s` starts that many seconds
after the previous user turn ended, i.e. over the assistant's reply; any other turn starts
REPLY_GAP_S after it, room for a whole reply (the question bench's answers take ~3 s from the
end of speech, and the cascade's and the oracle's prompts ask for at most 30 words). The track
then goes through `run_session` like a question, and the last turn is scored from the output audio
(`score_dialogue`): answer heard (the question bench's `find_answer`), onset and answer latency;
for `interrupt` dialogues how soon the assistant fell silent after the user cut in (`yield_time`)
and whether the new question was then answered; for `backchannel` dialogues whether the assistant
talked through it (`talk_through`).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..audio.frames import AUDIBLE, SAMPLE_RATE, InputAudio, write_mono
from .common import (MemorySampler, _median, base_mode, modes_and_policies, output_dir, read_jsonl, report, session_config,
                     front_end_options, variant_of)
from ..runtime.errors import TandemError
from ..record.metrics import count_causes, summarize
from ..think.oracle import DEFAULT_POLICY
from ..runner import run_session, write_outputs
from .fluency import fluency, fluency_summary, repair_examples
from .scoring import BLOCK_S, Transcriber, Word, audible_blocks, find_answer, hear, listening_context, onset_after
from ..runtime.stack import Stack, stack_config

log = logging.getLogger(__name__)

LEAD_S = 0.5  # silence before the first turn
REPLY_GAP_S = 7.0  # silence after a turn that nobody talks over: room for a reply
TAIL_S = 8.0  # silence after the last turn: room for its answer
SPEECH = 0.02  # input level that counts as the user's speech (as scoring.speech_end_of)
YIELD_SILENCE_S = 1.0  # falling silent = a silence at least this long (longer than any pause inside a reply)
YIELD_TARGET_S = 0.5
BACKCHANNEL_GAP_S = 0.5  # a silence longer than this ...
BACKCHANNEL_AFTER_S = 0.5  # ... starting between the backchannel's onset and this long after its end = a yield
KINDS = ("followup", "interrupt", "backchannel")


@dataclass(frozen=True)
class Turn:
    say: str
    answers: list[str]
    talk_over_s: float | None = None


@dataclass(frozen=True)
class Dialogue:
    id: str
    kind: str
    turns: list[Turn]


@dataclass(frozen=True)
class Span:
    """A user turn's speech on the rendered track (seconds)."""
    onset: float
    end: float


def _dialogue(obj: dict[str, Any]) -> Dialogue:
    turns = [Turn(str(t["say"]), [str(a) for a in t.get("answers", [])],
                  float(t["talk_over_s"]) if t.get("talk_over_s") is not None else None)
             for t in obj["turns"]]
    if not turns or turns[0].talk_over_s is not None:
        raise ValueError("a dialogue needs turns, and its first turn talks over nothing")
    return Dialogue(str(obj["id"]), str(obj.get("kind", "followup")), turns)


def load_dialogues(path: Path, limit: int | None = None) -> list[Dialogue]:
    out = read_jsonl(path, "dialogues", _dialogue, "a dialogue object with id, kind, turns of say/answers")
    return out[:limit] if limit else out


def _speech_bounds(clip: np.ndarray) -> tuple[int, int]:
    loud = np.flatnonzero(np.abs(clip) > SPEECH)
    if not len(loud):
        raise TandemError("a dialogue turn was synthesized as silence")
    return int(loud[0]), int(loud[-1]) + 1


def render(clips: list[np.ndarray], turns: list[Turn], lead_s: float = LEAD_S, gap_s: float = REPLY_GAP_S,
           tail_s: float = TAIL_S) -> tuple[np.ndarray, list[Span]]:
    """One user track from the turns' clips (24 kHz), each placed by its measured speech onset: the
    first at `lead_s`, a talked-over one `talk_over_s` after the previous turn's speech end, any
    other `gap_s` after it. Returns the track and each turn's speech span on it."""
    placed: list[tuple[int, np.ndarray]] = []
    spans: list[Span] = []
    for clip, turn in zip(clips, turns):
        a, b = _speech_bounds(clip)
        if spans:
            onset = spans[-1].end + (turn.talk_over_s if turn.talk_over_s is not None else gap_s)
        else:
            onset = lead_s
        at = round(onset * SAMPLE_RATE)
        placed.append((at - a, clip[max(0, a - at):]))  # a clip's quiet lead-in is cut if it would start before 0
        spans.append(Span(at / SAMPLE_RATE, (at + b - a) / SAMPLE_RATE))
    n = round(spans[-1].end * SAMPLE_RATE + tail_s * SAMPLE_RATE)
    track = np.zeros(n, np.float32)
    for start, clip in placed:
        start = max(0, start)
        seg = clip[: n - start]
        track[start: start + len(seg)] += seg  # turns never overlap: each starts after the previous ended
    return track, spans


def _silence_start(loud: np.ndarray, i0: int, min_blocks: int, stop: int | None = None) -> int | None:
    """First block i >= i0 (and < stop) where a silence of `min_blocks` begins (the track's end counts
    as silence), or None."""
    stop = len(loud) if stop is None else min(stop, len(loud))
    run = 0  # silent blocks counted from i0 on: a silence begun before i0 is found at i0
    for i in range(i0, len(loud)):
        if loud[i]:
            run = 0
            continue
        run += 1
        start = i - run + 1
        if start >= stop:
            return None
        if run >= min_blocks:
            return start
    start = len(loud) - run
    return start if run and start < stop else None


def talking_at(assistant: np.ndarray, t: float, window_s: float = 0.3) -> bool:
    """Whether the assistant was audible in the `window_s` before `t`."""
    a, b = int(max(0.0, t - window_s) * SAMPLE_RATE), int(t * SAMPLE_RATE)
    return bool(b > a and np.max(np.abs(assistant[a:b])) > AUDIBLE)


def yield_time(assistant: np.ndarray, onset: float, min_silence_s: float = YIELD_SILENCE_S) -> float | None:
    """Seconds from the user's onset to the start of the assistant's first silence of at least
    `min_silence_s` (0 when it was already silent); None when it never fell silent."""
    loud = audible_blocks(assistant)
    i0 = int(round(onset / BLOCK_S))
    i = _silence_start(loud, i0, int(round(min_silence_s / BLOCK_S)))
    return None if i is None else round((i - i0) * BLOCK_S, 3)


def talk_through(assistant: np.ndarray, span: Span, gap_s: float = BACKCHANNEL_GAP_S,
                 after_s: float = BACKCHANNEL_AFTER_S) -> dict[str, Any]:
    """Did the assistant keep talking through a backchannel? It must have been talking when it
    began, and no silence longer than `gap_s` may start between its onset and `after_s` after its
    end (what a yield the backchannel caused would look like; a reply that happens to end there
    counts too, since it did not talk through)."""
    loud = audible_blocks(assistant)
    i0 = int(round(span.onset / BLOCK_S))
    stop = int(round((span.end + after_s) / BLOCK_S)) + 1
    i = _silence_start(loud, i0, int(round(gap_s / BLOCK_S)) + 1, stop)
    talking = talking_at(assistant, span.onset)
    return {"talking_at_onset": talking, "gap_start_s": None if i is None else round((i - i0) * BLOCK_S, 3),
            "talked_through": talking and i is None}


def score_dialogue(d: Dialogue, spans: list[Span], assistant: np.ndarray, words: list[list[Word]],
                   tl: dict[str, Any]) -> dict[str, Any]:
    """`words[i]`: the assistant's words (track times) heard from turn i's onset to the next turn's."""
    s = summarize(tl)
    turns = []
    for t, sp, ws in zip(d.turns, spans, words):
        hit = find_answer(ws, t.answers, after=sp.end) if t.answers else None
        turns.append({"say": t.say, "onset_s": round(sp.onset, 3), "end_s": round(sp.end, 3),
                      "talk_over_s": t.talk_over_s, "correct": hit is not None if t.answers else None,
                      "answer_s": round(hit.start - sp.end, 3) if hit else None})
    last, sp = turns[-1], spans[-1]
    onset = onset_after(assistant, sp.end)
    rec: dict[str, Any] = {
        "deadline_misses": s.get("deadline_misses", 0), "miss_causes": s.get("miss_causes", []),
        "late_p99_ms": s.get("late_p99_ms"),
        "frames": s.get("frames"), "starts": s.get("starts"), "cancels": s.get("cancels"),
        "finals": [e["text"] for e in tl["events"] if e["kind"] == "final"],
        "barge_ins": sum(1 for e in tl["events"] if e["kind"] == "barge_in"),
        "said_text": s["said"], "said": " ".join(w.text for w in words[-1]),
        "turns": turns, "correct": bool(last["correct"]), "answer_s": last["answer_s"],
        "onset_s": round(onset, 3) if onset is not None else None,
        "talking_at_end": talking_at(assistant, sp.end),
    }
    if d.kind == "interrupt":
        y = yield_time(assistant, sp.onset)
        rec.update({"talking_at_onset": talking_at(assistant, sp.onset), "yield_s": y,
                    "yielded": y is not None and y <= YIELD_TARGET_S,
                    "yielded_and_answered": y is not None and y <= YIELD_TARGET_S and bool(last["correct"])})
    elif d.kind == "backchannel":
        rec.update(talk_through(assistant, sp))
        # the reply went on, if after a longer pause than talking through allows: no barge-in dropped it
        rec["reply_kept"] = rec["talking_at_onset"] and not any(
            e["kind"] == "barge_in" and float(e["t"]) >= sp.onset for e in tl["events"])
    return rec


def _count(rs: list[dict[str, Any]], key: str) -> str:
    return f"{sum(bool(r.get(key)) for r in rs)}/{len(rs)}"


def summarize_dialogues(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant (mode) and kind of dialogue."""
    out: dict[str, dict[str, Any]] = {}
    for v in dict.fromkeys(variant_of(r) for r in runs):
        seen = list(dict.fromkeys(r["kind"] for r in runs))
        for kind in [k for k in KINDS if k in seen] + [k for k in seen if k not in KINDS]:
            rs = [r for r in runs if variant_of(r) == v and r["kind"] == kind]
            if not rs:
                continue
            ok = [r for r in rs if not r.get("failed")]
            m: dict[str, Any] = {"dialogues": len(rs), "failed": len(rs) - len(ok),
                                 "deadline_misses": int(sum(r.get("deadline_misses", 0) for r in ok)),
                                 "miss_causes": count_causes(ok),
                                 "onset_s_median": _median([r.get("onset_s") for r in ok]),
                                 "answer_s_median": _median([r.get("answer_s") for r in ok]),
                                 "self_repairs": fluency_summary(ok)["self_repairs"]}
            if kind != "backchannel":
                m["correct"] = _count(rs, "correct")
            if kind == "interrupt":
                ys = [r["yield_s"] for r in ok if r.get("yield_s") is not None]
                m.update({"yielded_within_0.5s": _count(rs, "yielded"),
                          "yielded_and_answered": _count(rs, "yielded_and_answered"),
                          "yield_s_median": _median(ys), "yield_s_max": max(ys) if ys else None,
                          "never_yielded": sum(1 for r in ok if r.get("yield_s") is None),
                          # a reply that had not begun, or had ended, when the user cut in yields in 0 s
                          "talking_at_onset": _count(rs, "talking_at_onset")})
            if kind == "backchannel":
                m.update({"talked_through": _count(rs, "talked_through"), "reply_kept": _count(rs, "reply_kept"),
                          "talking_at_onset": _count(rs, "talking_at_onset")})
            out[f"{v} / {kind}"] = m
    return out


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


def write_summary_md(path: Path, summary: dict[str, dict[str, Any]], runs: list[dict[str, Any]],
                     extra: dict[str, Any]) -> None:
    cols = ["dialogues", "failed", "correct", "self_repairs", "onset_s_median", "answer_s_median", "yielded_within_0.5s",
            "yield_s_median", "yield_s_max", "never_yielded", "yielded_and_answered", "talked_through",
            "reply_kept", "talking_at_onset", "deadline_misses", "miss_causes"]
    lines = ["| mode / kind | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for key, m in summary.items():
        lines.append(f"| {key} | " + " | ".join(_cell(m.get(c)) for c in cols) + " |")
    lines += ["", "| dialogue | kind | mode | correct | onset_s | answer_s | yield_s | talked_through | misses | said (last turn) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if r.get("failed"):
            lines.append(f"| {r['dialogue_id']} | {r['kind']} | {variant_of(r)} | failed: {r.get('error', '')[:60]} |||||||")
            continue
        said = r.get("said", "").replace("|", "/")[:80]
        lines.append(f"| {r['dialogue_id']} | {r['kind']} | {variant_of(r)} | {_cell(r.get('correct') if r['kind'] != 'backchannel' else None)} "
                     f"| {_cell(r.get('onset_s'))} | {_cell(r.get('answer_s'))} | {_cell(r.get('yield_s'))} "
                     f"| {_cell(r.get('talked_through'))} | {r.get('deadline_misses', 0)} | {said} |")
    lines.append("")
    examples = repair_examples(runs, "dialogue_id")
    if examples:
        lines += ["Heard self-repairs (each reply's audio transcribed, `bench/fluency.py`):", "", *examples, ""]
    lines += [f"- {k}: {v}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")


def plot_dialogues(path: Path, runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(variant_of(r) for r in runs))
    kinds = [k for k in KINDS if any(r["kind"] == k for r in runs)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    ax = axes[0]  # how often each kind went right: answered (follow-ups), yielded and answered, talked through
    key = {"followup": "correct", "interrupt": "yielded_and_answered", "backchannel": "talked_through"}
    w = 0.8 / max(1, len(variants))
    for j, v in enumerate(variants):
        rates = [np.mean([bool(r.get(key[k])) for r in runs if variant_of(r) == v and r["kind"] == k] or [0]) for k in kinds]
        ax.bar(np.arange(len(kinds)) + j * w, rates, w, label=v, alpha=0.8)
    ax.set_xticks(np.arange(len(kinds)) + w * (len(variants) - 1) / 2,
                  [f"{k}\n({key[k]})" for k in kinds], fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_title("share of dialogues right", fontsize=9)
    ax.legend(fontsize=7)
    for ax, (k, label, kinds_of) in zip(axes[1:], [("answer_s", "last turn: answer latency (s)", ("followup", "interrupt")),
                                                  ("yield_s", "interrupt: user onset -> assistant silent (s)", ("interrupt",))]):
        for j, v in enumerate(variants):
            d = [r[k] for r in runs if variant_of(r) == v and r["kind"] in kinds_of and r.get(k) is not None]
            ax.plot(np.full(len(d), j) + np.random.default_rng(j).uniform(-0.1, 0.1, len(d)), d, "o", alpha=0.7)
        ax.set_xticks(range(len(variants)), variants, fontsize=7)
        ax.set_xlim(-0.5, len(variants) - 0.5)
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    axes[2].axhline(YIELD_TARGET_S, color="r", ls="--", lw=1)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def turn_windows(spans: list[Span], n: int) -> list[tuple[int, int]]:
    """Samples from each user turn's onset to the next one's (the last: to the end of the channel)."""
    starts = [int(sp.onset * SAMPLE_RATE) for sp in spans]
    return list(zip(starts, starts[1:] + [n]))


def reply_windows(spans: list[Span], n: int) -> list[tuple[int, int]]:
    """Samples of each reply, for its fluency: from the end of the user turn it answers to the end of the next
    one (the first from the start, the last to the end of the channel). What the voice says while the user
    talks over it is the tail of the reply under way, not the first words of the answer to the user's new
    turn (the voice talks on through the first 0.48 s of any speech over it, turn/backchannel.py), as
    Full-Duplex-Bench hears a reply to an interruption only from the interruption's end."""
    ends = [int(sp.end * SAMPLE_RATE) for sp in spans]
    return list(zip([0] + ends[1:], ends[1:] + [n]))


def _words_per_turn(transcriber: Transcriber, assistant: np.ndarray, spans: list[Span],
                    turns: list[Turn]) -> list[list[Word]]:
    """The assistant's words heard from each turn's onset to the next turn's (the last: to the end),
    transcribed window by window (short windows keep Whisper's word times and text reliable), each heard
    with what the user has said so far as the listener's context (`scoring.hear`)."""
    out = []
    for i, (sp, (a, b)) in enumerate(zip(spans, turn_windows(spans, len(assistant)))):
        context = listening_context(" ".join(t.say for t in turns[: i + 1]), turns[i].answers)
        out.append([Word(w.text, w.start + sp.onset, w.end + sp.onset)
                    for w in hear(transcriber, assistant[a:b], turns[i].answers, context, after=sp.end - sp.onset)])
    return out


def run_dialogue_bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..audio.voices import speak

    dialogues = load_dialogues(args.dialogues, args.limit)
    modes, policies = modes_and_policies(args)
    checkpoint = getattr(args, "checkpoint", None)
    if checkpoint is not None and not Path(checkpoint).exists():
        raise TandemError(f"no checkpoint at {checkpoint}")
    fe_kwargs = {"checkpoint": checkpoint} if checkpoint is not None else {}
    variants = [(m, p) for m in modes for p in (policies if base_mode(m) == "tandem" else [None])]
    out = output_dir(args.out)
    transcriber = Transcriber()
    runs: list[dict[str, Any]] = []
    t_start = time.time()
    with Stack(stack_config(args)) as stack:
        with MemorySampler([os.getpid(), *stack.pids()]) as mem:
            for d in tqdm(dialogues, desc="dialogues", unit="d"):
                clips = [speak(t.say, args.voice, lead_s=0.0, tail_s=0.0) for t in d.turns]
                user, spans = render(clips, d.turns)
                in_wav = out / "audio" / f"{d.id}.in.wav"
                write_mono(in_wav, user)
                for mode, policy in variants:
                    label = f"{mode}[{policy}]" if policy and len(policies) > 1 else mode
                    stem = f"{d.id}.{mode}-{policy}" if policy and len(policies) > 1 else f"{d.id}.{mode}"
                    rec: dict[str, Any] = {"dialogue_id": d.id, "kind": d.kind, "mode": mode, "variant": label,
                                           "policy": policy, "input_wav": str(in_wav),
                                           "spans": [[round(s.onset, 3), round(s.end, 3)] for s in spans]}
                    try:
                        res = run_session(stack, InputAudio(user, SAMPLE_RATE, 1), session_config(mode),
                                          front_end_name=args.front_end,
                                          front_end_kwargs={**fe_kwargs, **front_end_options(mode)},
                                          oracle_policy=policy or DEFAULT_POLICY,
                                          meta={"input": str(in_wav), "dialogue_id": d.id})
                        paths = {k: out / sub / f"{stem}.{ext}" for k, sub, ext in
                                 (("output_wav", "audio", "wav"), ("timeline", "timelines", "json"), ("plot", "timelines", "png"))}
                        write_outputs(res, paths["output_wav"], paths["timeline"], paths["plot"])
                        words = _words_per_turn(transcriber, res.assistant, spans, d.turns)
                        rec.update(score_dialogue(d, spans, res.assistant, words, res.timeline.to_dict()))
                        rec.update(fluency(transcriber, res.assistant, rec["said_text"], reply_windows(spans, len(res.assistant))))
                        rec.update({k: str(v) for k, v in paths.items()})
                    except TandemError:
                        raise
                    except Exception as e:  # noqa: BLE001 - one failed run must not end the benchmark
                        log.exception("run %s/%s failed", d.id, label)
                        rec.update({"failed": True, "error": f"{type(e).__name__}: {e}", "correct": False})
                    runs.append(rec)
    summary = summarize_dialogues(runs)
    extra = {"dialogues": len(dialogues), "voice": args.voice, "policy": args.policy,
             "reply_gap_s": REPLY_GAP_S, "tail_s": TAIL_S,
             "checkpoint": str(checkpoint) if checkpoint is not None else "shipped",
             "peak_rss_mb_all_processes": round(mem.peak_mb, 1), "wall_s": round(time.time() - t_start, 1),
             "llm": stack.llm_config.endpoint if stack.llm_config else None}
    report(out, {"runs": runs, "summary": summary, "meta": extra}, lambda p: write_summary_md(p, summary, runs, extra),
           "dialogues.png", lambda p: plot_dialogues(p, runs))
    return 0
