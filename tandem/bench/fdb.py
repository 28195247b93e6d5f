"""`tandem bench --fdb DIR`: Full-Duplex-Bench's v1 tasks through the modes, scored by its rules.

DIR is in FDB's layout: `DIR/<task>/<id>/input.wav` beside the task's file (`pause.json`, `turn_taking.json`,
`interrupt.json`; a backchannel item has none, its folder's name says "backchannel"). Each item's input goes
through each mode as one session; its output is written where FDB's scripts look for it,
`OUT/<mode>/<task>/<id>/output.wav` (the assistant's channel only, at the input's rate and length) and
`output.json` (FDB's transcript schema, from Whisper's word times; for an interruption only the words after
it ends, as FDB's ASR cuts), with the task's file copied beside them, so `evaluate.py --root_dir
OUT/<mode>/<task>` runs on them as they are. The scores here are FDB's rules (fdb_rules.py); with accepted
`answers` in an interruption's or turn's file (this project's dev set adds them), whether the reply answers
the new question, judged as `tandem bench --questions` judges an answer.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from ..audio.frames import SAMPLE_RATE, load_input, resample, write_mono
from ..record.metrics import summarize
from ..runner import run_session
from ..runtime.errors import TandemError
from ..runtime.stack import Stack, stack_config
from ..think.oracle import DEFAULT_POLICY
from .common import _median, front_end_options, report, session_config
from .dialogues import Span, talk_through
from .fdb_rules import judge_backchannel, latency, takes_turn, timing_distance, vad_segments
from .scoring import Transcriber, Word, find_answer

log = logging.getLogger(__name__)

# task: (FDB's file beside input.wav, a word of the folder's name)
TASKS = {"pause": ("pause.json", "pause"), "turn": ("turn_taking.json", "turn_taking"),
         "interruption": ("interrupt.json", "interruption"),
         # not FDB v1 (after v1.5's user backchannel): the user's "mm-hm" while the reply is under way
         "user_backchannel": ("user_backchannel.json", "user_backchannel"),
         "backchannel": (None, "backchannel")}
GT_DISTRIBUTION = "icc_gt_distribution.json"  # FDB's, for the backchannel timing; looked for in DIR


@dataclass(frozen=True)
class Item:
    task: str
    task_dir: str  # the folder under DIR, kept in OUT
    id: str
    folder: Path
    event: list[dict[str, Any]]  # the task's file ([] for a backchannel item)

    @property
    def since(self) -> float:
        """When the assistant's turn may begin: the user's turn end, or the interruption's end."""
        if self.task == "turn":
            return float(self.event[0]["timestamp"][0])
        if self.task == "interruption":
            return float(self.event[0]["timestamp"][1])
        return 0.0

    @property
    def answers(self) -> list[str]:
        return [str(a) for a in (self.event[0].get("answers", []) if self.event else [])]


def _task_of(folder: Path) -> str | None:
    for task, (name, word) in TASKS.items():
        if (name is not None and (folder / name).exists()) or (name is None and word in folder.parent.name):
            return task
    return None


def discover(root: Path, tasks: list[str] | None = None) -> list[Item]:
    """Every `<task>/<id>/input.wav` under `root` whose task is known; a clear error when none is."""
    if not root.is_dir():
        raise TandemError(f"--fdb: {root} is not a folder in Full-Duplex-Bench's layout (<task>/<id>/input.wav)")
    items = []
    for wav in sorted(root.glob("*/*/input.wav")):
        task = _task_of(wav.parent)
        if task is None or (tasks and task not in tasks):
            continue
        name = TASKS[task][0]
        try:
            event = json.loads((wav.parent / name).read_text()) if name else []
            if name and not (isinstance(event, list) and event and "timestamp" in event[0]):
                raise ValueError("expected a list of objects with a timestamp")
        except (json.JSONDecodeError, ValueError) as e:
            raise TandemError(f"{wav.parent / name}: not FDB's {name} ({e})") from None
        items.append(Item(task, wav.parent.parent.name, wav.parent.name, wav.parent, event))
    if not items:
        raise TandemError(f"--fdb: no items under {root} (expected <task>/<id>/input.wav with pause.json, "
                          "turn_taking.json or interrupt.json, or a folder named *backchannel*)")
    return items


def as_chunks(words: list[Word], offset: float = 0.0) -> dict[str, Any]:
    """Whisper's words as FDB's output.json: the text and one chunk per word, on the input's clock. A "word" of
    punctuation alone is left out: Whisper tiny writes "." over a click or near-silence (a reply cut at the
    input's end), with times spanning a second, which FDB's take-turn rule would count; a word-level ASR such
    as FDB's parakeet gives no such word."""
    words = [w for w in words if re.search(r"\w", w.text)]
    chunks = [{"text": w.text, "timestamp": [round(w.start + offset, 3), round(w.end + offset, 3)]} for w in words]
    return {"text": " ".join(w.text for w in words), "chunks": chunks}


def output_channel(assistant24k: np.ndarray, rate: int, n: int) -> np.ndarray:
    """The assistant's channel at the input's rate, cut or padded to its `n` samples."""
    x = resample(assistant24k, SAMPLE_RATE, rate)[:n]
    return np.concatenate([x, np.zeros(n - len(x), np.float32)])


def score_item(item: Item, transcript: dict[str, Any], out16k: np.ndarray | None, duration_s: float,
               truth: dict[str, list[float]] | None, out24k: np.ndarray | None = None) -> dict[str, Any]:
    """One item by FDB's rule for its task (`out16k`: the output at 16 kHz, for the backchannel VAD;
    `out24k`: the assistant's channel, for talking on through the user's backchannel)."""
    chunks = transcript["chunks"]
    rec: dict[str, Any] = {"took_turn": takes_turn(chunks), "words": len(chunks), "said": transcript["text"]}
    if item.task in ("turn", "interruption"):
        rec["latency_s"] = latency(chunks, item.since)
        if item.answers:
            words = [Word(c["text"], *c["timestamp"]) for c in chunks]
            rec["answered"] = find_answer(words, item.answers, after=item.since) is not None
    if item.task == "pause":  # diagnostic: words begun inside the pause itself (FDB judges the whole output)
        a, b = item.event[0]["timestamp"]
        rec["words_in_pause"] = sum(1 for c in chunks if a <= c["timestamp"][0] < b)
    if item.task == "user_backchannel" and out24k is not None:
        a, b = item.event[0]["timestamp"]
        rec.update(talk_through(out24k, Span(float(a), float(b))))
    if item.task == "backchannel" and out16k is not None:
        v = judge_backchannel(vad_segments(out16k), chunks, duration_s)
        rec.update({"took_turn": v.took_floor, "backchannels": len(v.backchannels),
                    "backchannels_per_s": round(v.per_s, 4)})
        if truth is not None and item.id in truth:
            rec["timing_jsd"] = round(timing_distance(v.backchannels, duration_s, truth[item.id]), 4)
    return rec


def summarize_fdb(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per mode and task: FDB's numbers (TOR, mean latency over taken items) and their medians."""
    out: dict[str, dict[str, Any]] = {}
    for mode in dict.fromkeys(r["mode"] for r in runs):
        for task in TASKS:
            rs = [r for r in runs if r["mode"] == mode and r["task"] == task and not r.get("failed")]
            if not rs:
                continue
            m: dict[str, Any] = {"items": len(rs), "tor": round(float(np.mean([r["took_turn"] for r in rs])), 3)}
            lat = [r["latency_s"] for r in rs if r.get("latency_s") is not None]
            if task in ("turn", "interruption"):
                m.update({"latency_mean_s": round(float(np.mean(lat)), 3) if lat else None,
                          "latency_median_s": _median(lat)})
                judged = [r["answered"] for r in rs if "answered" in r]
                if judged:
                    m["answered"] = f"{sum(judged)}/{len(judged)}"
            if task == "pause":
                m["spoke_in_pause"] = f"{sum(r['words_in_pause'] > 0 for r in rs)}/{len(rs)}"
            if task == "user_backchannel":
                m["talked_on"] = f"{sum(bool(r.get('talked_through')) for r in rs)}/{len(rs)}"
                m["talking_at_onset"] = f"{sum(bool(r.get('talking_at_onset')) for r in rs)}/{len(rs)}"
            if task == "backchannel":
                m["backchannels_per_s"] = round(float(np.mean([r["backchannels_per_s"] for r in rs])), 4)
                jsd = [r["timing_jsd"] for r in rs if "timing_jsd" in r]
                m["timing_jsd"] = round(float(np.mean(jsd)), 4) if jsd else None
            m["failed"] = sum(1 for r in runs if r["mode"] == mode and r["task"] == task and r.get("failed"))
            out[f"{mode} / {task}"] = m
    return out


def write_summary(path: Path, summary: dict[str, dict[str, Any]], runs: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    cols = ["items", "tor", "latency_mean_s", "latency_median_s", "answered", "spoke_in_pause", "talked_on",
            "talking_at_onset", "backchannels_per_s", "timing_jsd", "failed"]
    lines = ["| mode / task | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    lines += [f"| {k} | " + " | ".join("-" if m.get(c) is None else str(m[c]) for c in cols) + " |"
              for k, m in summary.items()]
    lines += ["", "| item | task | mode | took turn | latency s | answered | said |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        said = str(r.get("said", r.get("error", ""))).replace("|", "/")[:90]
        lines.append(f"| {r['task_dir']}/{r['id']} | {r['task']} | {r['mode']} | {r.get('took_turn', '-')} "
                     f"| {r.get('latency_s', '-')} | {r.get('answered', '-')} | {said} |")
    lines += ["", *[f"- {k}: {v}" for k, v in meta.items()]]
    path.write_text("\n".join(lines) + "\n")


def plot_fdb(path: Path, runs: list[dict[str, Any]]) -> None:
    """One panel per task: each mode's TOR (the bar; lower is better for pause and backchannel; for the user's
    backchannel, how often it talked on) and, for the turn and interruption tasks, each taken item's latency
    (the dots, right axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(r["task"] == t for r in runs)]
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        better = "higher" if task in ("turn", "interruption") else "lower"
        key, what = ("talked_through", "talked on") if task == "user_backchannel" else ("took_turn", "take-turn rate")
        better = "higher" if task == "user_backchannel" else better
        tw = ax.twinx() if task in ("turn", "interruption") else None
        for j, mode in enumerate(modes):
            rs = [r for r in runs if r["task"] == task and r["mode"] == mode and not r.get("failed")]
            ax.bar(j, np.mean([bool(r.get(key)) for r in rs]) if rs else 0, 0.6, alpha=0.5, color=f"C{j}")
            lat = [r["latency_s"] for r in rs if r.get("latency_s") is not None]
            if tw is not None and lat:
                tw.plot(np.full(len(lat), j) + np.random.default_rng(j).uniform(-0.15, 0.15, len(lat)), lat,
                        "o", color=f"C{j}", ms=4)
        if tw is not None:
            tw.set_ylabel("latency s (dots)", fontsize=7)
        ax.set_xticks(range(len(modes)), modes, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{task}: {what} ({better} is better)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _assistant(stack: Stack | None, server: str | None, item: Item, mode: str, fe_kwargs: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
    """The assistant's 24 kHz channel for `item`: a session of `mode` here, or the live `server` played as FDB's
    client plays it (fdb_client.py); with what the session's timeline says of its frames."""
    audio = load_input(item.folder / "input.wav")
    if server is not None:
        from .fdb_client import play_item

        return play_item(server, audio.samples), {}
    res = run_session(stack, audio, session_config(mode),
                      front_end_kwargs={**fe_kwargs, **front_end_options(mode)}, oracle_policy=DEFAULT_POLICY,
                      meta={"input": str(item.folder / "input.wav"), "fdb_task": item.task})
    return res.assistant, {"deadline_misses": summarize(res.timeline.to_dict()).get("deadline_misses", 0),
                           "timeline": res.timeline}


def _run_item(stack: Stack | None, server: str | None, transcriber: Transcriber, item: Item, mode: str, out: Path,
              truth: dict[str, list[float]] | None, fe_kwargs: dict[str, Any]) -> dict[str, Any]:
    wav = item.folder / "input.wav"
    info = sf.info(str(wav))
    rate, n = info.samplerate, info.frames
    assistant, health = _assistant(stack, server, item, mode, fe_kwargs)
    dest = out / mode / item.task_dir / item.id
    dest.mkdir(parents=True, exist_ok=True)
    channel = output_channel(assistant, rate, n)
    write_mono(dest / "output.wav", channel, rate)
    name = TASKS[item.task][0]
    if name:
        shutil.copyfile(item.folder / name, dest / name)
    cut = item.since if item.task == "interruption" else 0.0  # FDB's ASR hears only what follows it
    transcript = as_chunks(transcriber.words(assistant[int(cut * SAMPLE_RATE):]), cut)
    (dest / "output.json").write_text(json.dumps(transcript, indent=1))
    if "timeline" in health:
        health.pop("timeline").save(dest / "timeline.json")
    rec = score_item(item, transcript, resample(channel, rate, 16000) if item.task == "backchannel" else None,
                     n / rate, truth, assistant)
    rec.update({**health, "output": str(dest)})
    return rec


def server_mode(url: str) -> str:
    """The mode a running `tandem serve` speaks in (its /api/health), to label its outputs."""
    import urllib.request

    health = url.replace("ws://", "http://").replace("wss://", "https://").rstrip("/") + "/api/health"
    try:
        with urllib.request.urlopen(health, timeout=5) as r:
            return str(json.loads(r.read()).get("mode", "server"))
    except OSError as e:
        raise TandemError(f"--server: no tandem server answers at {health} ({e}); start one with `tandem serve`") from None


def run_fdb_bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    root = Path(args.fdb)
    items = discover(root, getattr(args, "fdb_tasks", None))
    items = items[: args.limit] if args.limit else items
    server = getattr(args, "server", None)
    modes = [server_mode(server)] if server else [m.strip() for m in args.modes.split(",") if m.strip()]
    gt = root / GT_DISTRIBUTION
    truth = json.loads(gt.read_text()) if gt.exists() else None
    checkpoint = getattr(args, "checkpoint", None)
    fe_kwargs = {"checkpoint": checkpoint} if checkpoint is not None else {}
    out = Path(args.out).resolve()  # FDB's layout under it: <mode>/<task>/<id>/
    out.mkdir(parents=True, exist_ok=True)
    transcriber = Transcriber()
    runs: list[dict[str, Any]] = []
    t0 = time.time()
    with (contextlib.nullcontext() if server else Stack(stack_config(args))) as stack:
        for item in tqdm(items, desc="fdb items", unit="item"):
            for mode in modes:
                rec: dict[str, Any] = {"task": item.task, "task_dir": item.task_dir, "id": item.id, "mode": mode}
                try:
                    rec.update(_run_item(stack, server, transcriber, item, mode, out, truth, fe_kwargs))
                except TandemError:
                    raise
                except Exception as e:  # noqa: BLE001 - one failed item must not end the benchmark
                    log.exception("fdb item %s/%s (%s) failed", item.task_dir, item.id, mode)
                    rec.update({"failed": True, "error": f"{type(e).__name__}: {e}"})
                runs.append(rec)
    summary = summarize_fdb(runs)
    meta = {"root": str(root), "items": len(items), "modes": modes, "asr": "Whisper tiny.en word times",
            "timing_truth": str(gt) if truth is not None else None, "wall_s": round(time.time() - t0, 1),
            "server": server, "llm": stack.llm_config.endpoint if stack is not None and stack.llm_config else None}
    report(out, {"runs": runs, "summary": summary, "meta": meta}, lambda p: write_summary(p, summary, runs, meta),
           "fdb.png", lambda p: plot_fdb(p, runs), f"; FDB's own scripts: evaluate.py --root_dir {out}/<mode>/<task>")
    return 0
