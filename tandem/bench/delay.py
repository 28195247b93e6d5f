"""`tandem bench --llm-delay 0,0.5,1,2`: does a slower LLM delay the start of the reply?

KAME's claim: the front-end never waits for the LLM, so a bigger, slower LLM costs the tandem nothing
at onset, while the cascade's onset grows with the LLM's time to first token. A `DelayProxy` in front
of the one LLM server (the embedded one or --llm-url) stands in for the slower model: for each delay
every question's one audio file goes through every mode, the delay set on the proxy per run. The
delays are interleaved per question, so a noisy stretch of the shared machine hits every cell alike.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..audio.frames import InputAudio, write_mono
from .common import (MemorySampler, Question, base_mode, front_end_options, load_questions, modes_and_policies, output_dir,
                     session_config)
from .questions import plot_latencies, score_run, summarize_runs, write_summary_md
from ..runtime.errors import TandemError
from ..llm.delay_proxy import DelayProxy
from ..runner import run_session, write_outputs
from .scoring import Transcriber
from ..runtime.stack import Stack, stack_config

log = logging.getLogger(__name__)


def parse_delays(text: str) -> list[float]:
    """argparse type of --llm-delay: comma-separated seconds, each >= 0, no repeats."""
    parts = [p.strip() for p in text.split(",")]
    try:
        delays = [float(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of seconds, e.g. 0,0.5,1,2") from None
    bad = [p for p, d in zip(parts, delays) if not math.isfinite(d) or d < 0]
    if bad:
        raise argparse.ArgumentTypeError(f"delays are seconds >= 0, not {', '.join(bad)}")
    if len(set(delays)) != len(delays):
        raise argparse.ArgumentTypeError(f"a delay is given twice in {text!r}")
    if max(delays) > 20:
        raise argparse.ArgumentTypeError("a delay over 20 s would pass the client's first-token timeout")
    return delays


def parse_rate(text: str) -> float:
    """argparse type of --llm-rate: tokens per second, > 0."""
    try:
        rate = float(text)
    except ValueError:
        rate = float("nan")
    if not math.isfinite(rate) or rate <= 0:
        raise argparse.ArgumentTypeError(f"a rate is tokens per second > 0, not {text!r}")
    return rate


def cell(mode: str, delay_s: float) -> str:
    return f"{mode} @{delay_s:g}s"


def llm_stream_counts(tl: dict[str, Any]) -> dict[str, int]:
    """Streams started, and cancelled before their first token: with a slow LLM the scheduler may
    supersede every stream before it says anything."""
    started, first, cancelled = set(), set(), set()
    for e in tl["events"]:
        sid = e.get("stream")
        if e["kind"] == "llm_start":
            started.add(sid)
        elif e["kind"] == "llm_first_token":
            first.add(sid)
        elif e["kind"] == "llm_cancel" and sid not in first:
            cancelled.add(sid)
    return {"llm_streams": len(started), "llm_cancelled_before_first_token": len(cancelled & started)}


def _median(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return round(float(np.median(ys)), 3) if ys else None


def delay_table(runs: list[dict[str, Any]], modes: list[str], delays: list[float]) -> list[dict[str, Any]]:
    """One row per mode x delay. Answer latency over the questions every mode got right at that
    delay (a like-for-like comparison) and over the mode's own correct ones."""
    rows = []
    for d in delays:
        at = [r for r in runs if r["llm_delay_s"] == d and not r.get("failed")]
        right = {m: {r["question_id"] for r in at if r["mode"] == m and r["correct"]} for m in modes}
        both = set.intersection(*right.values()) if right else set()
        for m in modes:
            rs = [r for r in at if r["mode"] == m]
            asked = [r for r in runs if r["llm_delay_s"] == d and r["mode"] == m]
            rows.append({
                "mode": m, "llm_delay_s": d, "runs": len(asked), "failed": len(asked) - len(rs),
                "onset_s": _median([r.get("onset_s") for r in rs]),
                "answer_s_all_correct": _median([r.get("answer_s") for r in rs if r["question_id"] in both]),
                "all_correct": len(both),
                "answer_s_own_correct": _median([r.get("answer_s") for r in rs if r["correct"]]),
                "correct": sum(bool(r["correct"]) for r in rs),
                "llm_ttft_s": _median([r.get("llm_ttft_s") for r in rs]),
                "llm_cancelled_before_first_token": _median([r.get("llm_cancelled_before_first_token") for r in rs]),
                "self_repairs": sum(1 for r in rs if r.get("fluent") is False),
            })
    return rows


def table_md(rows: list[dict[str, Any]]) -> str:
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f} s"

    lines = ["| mode | LLM delay | onset, median | answer latency, median (questions all modes got right) | "
             "answer latency, median (own correct) | correct | LLM first token, median | streams cancelled before "
             "their first token, median | heard self-repairs |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['llm_delay_s']:g} s | {f(r['onset_s'])} | {f(r['answer_s_all_correct'])} "
                     f"(n={r['all_correct']}) | {f(r['answer_s_own_correct'])} | {r['correct']}/{r['runs']} | "
                     f"{f(r['llm_ttft_s'])} | {r['llm_cancelled_before_first_token']} | "
                     f"{r.get('self_repairs', '-')}/{r['runs']} |")
    return "\n".join(lines)


def plot_delays(path: Path, rows: list[dict[str, Any]], modes: list[str]) -> None:
    """Delay on x; onset and answer latency against it, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a_on, a_ans) = plt.subplots(1, 2, figsize=(10, 4))
    for i, m in enumerate(modes):
        rs = [r for r in rows if r["mode"] == m]
        x = [r["llm_delay_s"] for r in rs]
        color = f"C{i}"

        def y(key: str) -> list[float]:
            return [np.nan if r[key] is None else r[key] for r in rs]

        a_on.plot(x, y("onset_s"), "o-", color=color, label=m)
        a_ans.plot(x, y("answer_s_all_correct"), "o-", color=color, label=f"{m} (questions all modes got right)")
        a_ans.plot(x, y("answer_s_own_correct"), "s--", color=color, alpha=0.5, label=f"{m} (own correct)")
    for ax, title in ((a_on, "onset latency, median (s)"), (a_ans, "answer latency, median (s)")):
        ax.set_xlabel("LLM delay before the first token (s)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _check(args: argparse.Namespace) -> tuple[list[str], str]:
    if getattr(args, "dialogues", None) is not None:
        raise TandemError("--llm-delay runs spoken questions (--questions), not --dialogues")
    modes, policies = modes_and_policies(args)
    if len(policies) != 1:
        raise TandemError("--llm-delay compares modes across delays: give one --policy")
    if getattr(args, "llm_load", False):
        raise TandemError("--llm-load and --llm-delay measure different things: give one of them")
    checkpoint = getattr(args, "checkpoint", None)
    if checkpoint is not None and not Path(checkpoint).exists():
        raise TandemError(f"no checkpoint at {checkpoint}")
    return modes, policies[0]


def run_delay_bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..audio import voices

    delays: list[float] = args.llm_delay
    rate: float | None = getattr(args, "llm_rate", None)
    modes, policy = _check(args)
    questions = load_questions(args.questions, args.limit, getattr(args, "stride", 1))
    checkpoint = getattr(args, "checkpoint", None)
    fe_kwargs = {"checkpoint": checkpoint} if checkpoint is not None else {}
    front_end = getattr(args, "front_end", "compact")
    if any(base_mode(m) in ("tandem", "frontend") for m in modes):
        from ..speak import frontend

        frontend.build(front_end, **fe_kwargs)  # a missing front-end fails before any audio
    # a slow LLM pushes the cascade's answer later: longer silence after the question keeps it in the recording
    tail = args.tail + max(delays)
    out = output_dir(args.out)
    transcriber = Transcriber()
    runs: list[dict[str, Any]] = []
    t_start = time.time()
    with Stack(stack_config(args)) as stack:
        if stack.llm_config is None:
            raise TandemError("--llm-delay needs an LLM")
        upstream = stack.llm_config
        with DelayProxy(upstream.url, rate=rate) as proxy, MemorySampler([os.getpid(), *stack.pids()]) as mem:
            stack.llm_config = dataclasses.replace(upstream, url=proxy.url)  # every session's client goes through it
            try:
                for q in tqdm(questions, desc="questions", unit="q"):
                    user = voices.speak(q.question, args.voice, tail_s=tail)
                    in_wav = out / "audio" / f"{q.id}.in.wav"
                    write_mono(in_wav, user)
                    for d in delays:
                        proxy.set(d, rate)
                        for mode in modes:
                            runs.append(_one_run(stack, user, in_wav, q, mode, d, rate, policy, front_end, fe_kwargs,
                                                 out, transcriber))
            finally:
                stack.llm_config = upstream
    rows = delay_table(runs, modes, delays)
    summary = summarize_runs(runs)  # every measure per mode x delay, as the plain bench reports it
    extra = {"questions": len(questions), "voice": args.voice, "policy": policy, "llm_delays_s": delays,
             "llm_rate_tok_s": rate, "tail_s": tail, "checkpoint": str(checkpoint) if checkpoint else "shipped",
             "peak_rss_mb_all_processes": round(mem.peak_mb, 1), "wall_s": round(time.time() - t_start, 1),
             "llm": upstream.endpoint, "proxy_streams": proxy.streams, "proxy_streams_cut_short": proxy.cut_short}
    (out / "results.json").write_text(json.dumps({"runs": runs, "delay_table": rows, "summary": summary, "meta": extra},
                                                 indent=1))
    write_summary_md(out / "summary.md", summary, extra, runs=runs)
    every = (out / "summary.md").read_text()
    (out / "summary.md").write_text(f"{table_md(rows)}\n\nEvery measure per mode and delay:\n\n{every}")
    plot_delays(out / "delay.png", rows, modes)
    plot_latencies(out / "latency.png", runs)
    print((out / "summary.md").read_text())
    print(f"results: {out / 'results.json'}\nplot: {out / 'delay.png'}")
    return 0


def _one_run(stack: Stack, user: np.ndarray, in_wav: Path, q: Question, mode: str, delay_s: float, rate: float | None,
             policy: str, front_end: str, fe_kwargs: dict[str, Any], out: Path, transcriber: Transcriber) -> dict[str, Any]:
    stem = f"{q.id}.{mode}.d{delay_s:g}"
    rec: dict[str, Any] = {"question_id": q.id, "mode": mode, "variant": cell(mode, delay_s), "llm_delay_s": delay_s,
                           "llm_rate_tok_s": rate, "policy": policy if base_mode(mode) == "tandem" else None,
                           "question": q.question, "answers": q.answers, "input_wav": str(in_wav)}
    try:
        res = run_session(stack, InputAudio(user, 24000, 1), session_config(mode), front_end_name=front_end,
                          front_end_kwargs={**fe_kwargs, **front_end_options(mode)}, oracle_policy=policy,
                          meta={"input": str(in_wav), "question_id": q.id, "llm_delay_s": delay_s})
        paths = {k: out / "timelines" / f"{stem}.{k}" for k in ("json", "png")}
        out_wav = out / "audio" / f"{stem}.wav"
        write_outputs(res, out_wav, paths["json"], paths["png"])
        tl = res.timeline.to_dict()
        rec.update(score_run(tl, user, res.assistant, q, transcriber))
        rec.update(llm_stream_counts(tl))
        rec.update({"output_wav": str(out_wav), "timeline": str(paths["json"]), "plot": str(paths["png"])})
    except TandemError:
        raise
    except Exception as e:  # noqa: BLE001 - one failed run must not end the benchmark
        log.exception("run %s/%s failed", q.id, cell(mode, delay_s))
        rec.update({"failed": True, "error": f"{type(e).__name__}: {e}", "correct": False})
    return rec
