"""`tandem bench`: the same spoken questions through each mode, paced in real time, scored.

Each question is spoken by a test voice (not the assistant's), padded with silence, written to
DIR/audio, and the very same file goes through every mode. The assistant channel is transcribed
with word times to find the answer; latencies are measured from the end of the user's speech
in the input signal.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..audio.frames import AUDIBLE, InputAudio, write_mono
from .copying import copied_exactly, cut_short, last_oracle_text
from ..runtime.errors import TandemError
from ..record.metrics import count_causes, summarize
from ..think.oracle import DEFAULT_POLICY
from ..runner import run_session, write_outputs
from .fluency import fluency, fluency_summary, repair_examples
from .scoring import Transcriber, find_answer, hear, listening_context, onset_after, response_gaps, speech_end_of
from ..runtime.stack import Stack, stack_config

from .common import (LLMLoad, MemorySampler, NUMERIC, Question, _median, base_mode, front_end_options, load_questions,
                     modes_and_policies, output_dir, report, session_config, variant_of)

log = logging.getLogger(__name__)
def score_run(tl: dict[str, Any], user: np.ndarray, assistant: np.ndarray, q: Question,
              transcriber: Transcriber) -> dict[str, Any]:
    s = summarize(tl)
    end = speech_end_of(user)
    words = hear(transcriber, assistant, q.answers, listening_context(q.question, q.answers), after=end or 0.0)
    said = " ".join(w.text for w in words)
    hit = find_answer(words, q.answers, after=end or 0.0)
    onset = onset_after(assistant, end) if end is not None else None
    gaps = response_gaps(assistant, end) if end is not None else []
    return {
        **s,
        "speech_end_s": round(end, 3) if end is not None else None,
        "onset_s": round(onset, 3) if onset is not None else None,
        "answer_s": round(hit.start - end, 3) if hit and end is not None else None,
        "correct": hit is not None,
        "said": said,
        "said_text": s["said"],
        "gaps_s": gaps,
        "gap_max_s": max(gaps) if gaps else 0.0,
        # the last oracle's names and numbers said whole and in order (None: no oracle, or none in it,
        # or a reply still being said when the recording ended, cut before its last key words)
        "copy_exact": copy_judgement(s["said"], last_oracle_text(tl), assistant),
        **fluency(transcriber, assistant, s["said"]),
    }


def copy_judgement(said: str, oracle: str, assistant: np.ndarray) -> bool | None:
    exact = copied_exactly(said, oracle)
    still_talking = bool(len(assistant)) and float(np.max(np.abs(assistant[-int(0.3 * 24000):]))) > AUDIBLE
    if exact is False and still_talking and cut_short(said, oracle):
        return None  # the recording cut the reply, not the front-end: nothing to judge
    return exact




def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in dict.fromkeys(variant_of(r) for r in runs):
        rs = [r for r in runs if variant_of(r) == mode]
        ok = [r for r in rs if not r.get("failed")]
        m: dict[str, Any] = {"runs": len(rs), "failed": len(rs) - len(ok),
                             "correct_rate": round(sum(r["correct"] for r in ok) / len(rs), 4) if rs else None,
                             "deadline_misses": int(sum(r.get("deadline_misses", 0) for r in ok)),
                             "miss_causes": count_causes(ok)}
        for key in NUMERIC:
            m[f"{key}_median"] = _median([r.get(key) for r in ok])
        judged = [r["copy_exact"] for r in ok if r.get("copy_exact") is not None]
        m["copy_exact"] = f"{sum(judged)}/{len(judged)}" if judged else None
        m["late_p99_ms_max"] = max([r.get("late_p99_ms", 0.0) for r in ok], default=None)
        m["final_latency_s_max"] = max([r["final_latency_s"] for r in ok if r.get("final_latency_s") is not None], default=None)
        m.update(fluency_summary(ok))
        out[mode] = m
    return out


def paired_answers(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tandem variant against each cascade variant on the questions both answered: the answer
    latency medians side by side and their ratio (a mode's own median would compare different
    questions when the two are right on different ones)."""
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in runs:
        if not r.get("failed"):
            by.setdefault(variant_of(r), {})[r["question_id"]] = r
    out = []
    for t in [v for v in by if base_mode(by[v][next(iter(by[v]))]["mode"]) == "tandem"]:
        for c in [v for v in by if base_mode(by[v][next(iter(by[v]))]["mode"]) == "cascade"]:
            both = [q for q in by[t] if q in by[c] and by[t][q]["correct"] and by[c][q]["correct"]]
            if not both:
                continue
            ta = float(np.median([by[t][q]["answer_s"] for q in both]))
            ca = float(np.median([by[c][q]["answer_s"] for q in both]))
            out.append({"tandem": t, "cascade": c, "questions": len(both), "tandem_answer_s": round(ta, 3),
                        "cascade_answer_s": round(ca, 3), "ratio": round(ta / ca, 3) if ca else None})
    return out


def write_summary_md(path: Path, summary: dict[str, Any], extra: dict[str, Any],
                     pairs: list[dict[str, Any]] | None = None, runs: list[dict[str, Any]] | None = None) -> None:
    keys = ["runs", "failed", "correct_rate", "self_repairs", "repair_kinds", "repairs_in_text", "onset_s_median", "answer_s_median", "final_latency_s_median",
            "final_latency_s_max", "gap_max_s_median", "partial_stale_median_s_median", "vad_end_delay_s_median", "llm_ttft_s_median",
            "tts_first_audio_s_median", "starts_median", "cancels_median", "oracle_tokens_fed_median",
            "oracle_resets_median", "oracle_restarts_median", "oracle_kept_median", "copy_exact", "late_p99_ms_max", "deadline_misses", "miss_causes"]
    modes = list(summary)
    lines = ["| measure | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(str(summary[m].get(k)) for m in modes) + " |")
    lines.append("")
    if pairs:
        lines += ["Answer latency on the questions both answered:", "",
                  "| tandem | cascade | questions | tandem | cascade | ratio |", "|---|---|---|---|---|---|"]
        lines += [f"| {p['tandem']} | {p['cascade']} | {p['questions']} | {p['tandem_answer_s']} s | "
                  f"{p['cascade_answer_s']} s | {p['ratio']}x |" for p in pairs]
        lines.append("")
    examples = repair_examples(runs or [], "question_id")
    if examples:
        lines += ["Heard self-repairs (the assistant's audio transcribed, `bench/fluency.py`):", "", *examples, ""]
    for k, v in extra.items():
        lines.append(f"- {k}: {v}")
    path.write_text("\n".join(lines) + "\n")


def plot_latencies(path: Path, runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(variant_of(r) for r in runs))
    keys = [("onset_s", "onset latency (s)"), ("answer_s", "answer latency (s)"), ("final_latency_s", "final transcript after speech end (s)")]
    fig, axes = plt.subplots(1, len(keys) + 1, figsize=(4.5 * (len(keys) + 1), 3.8))
    for ax, (k, label) in zip(axes, keys):
        data = [[r[k] for r in runs if variant_of(r) == m and r.get(k) is not None] for m in modes]
        if any(data):
            ax.boxplot([d if d else [np.nan] for d in data], tick_labels=modes)
            for i, d in enumerate(data, 1):
                ax.plot(np.full(len(d), i) + np.random.default_rng(0).uniform(-0.08, 0.08, len(d)), d, ".", alpha=0.6)
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
    ax = axes[-1]
    rates = [np.mean([bool(r.get("correct")) for r in runs if variant_of(r) == m]) for m in modes]
    ax.bar(range(len(modes)), rates, color="tab:green", alpha=0.7)
    for i, v in enumerate(rates):
        ax.text(i, v + 0.02, f"{v:.0%}", ha="center", fontsize=8)
    ax.set_xticks(range(len(modes)), modes, fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_title("correct (accepted answer heard)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_bench(args: argparse.Namespace) -> int:
    if getattr(args, "dialogues", None) is not None:  # multi-turn dialogues: their own runner and measures
        from .dialogues import run_dialogue_bench

        return run_dialogue_bench(args)
    if getattr(args, "fdb", None) is not None:  # Full-Duplex-Bench's layout and rules
        from .fdb import run_fdb_bench

        return run_fdb_bench(args)
    from tqdm import tqdm

    from ..audio.voices import speak

    questions = load_questions(args.questions, args.limit, getattr(args, "stride", 1))
    modes, policies = modes_and_policies(args)
    checkpoint = getattr(args, "checkpoint", None)
    if checkpoint is not None and getattr(args, "front_end", "compact") != "compact":
        raise TandemError("--checkpoint is for the compact front-end (the moshi one takes --moshi-weights)")
    if checkpoint is not None and not Path(checkpoint).exists():
        raise TandemError(f"no checkpoint at {checkpoint}")
    fe_kwargs = {"checkpoint": checkpoint} if checkpoint is not None else {}
    variants = [(m, p) for m in modes for p in (policies if base_mode(m) == "tandem" else [None])]
    if any(base_mode(m) in ("tandem", "frontend") for m in modes):
        from ..speak import frontend

        frontend.build(getattr(args, "front_end", "compact"), **fe_kwargs)
    out = output_dir(args.out)
    transcriber = Transcriber()
    runs: list[dict[str, Any]] = []
    load = LLMLoad() if getattr(args, "llm_load", False) else None
    t_start = time.time()
    with Stack(stack_config(args)) as stack:
        if load:
            load.__enter__()
        try:
            pids = [os.getpid(), *stack.pids()]
            with MemorySampler(pids) as mem:
                for q in tqdm(questions, desc="questions", unit="q"):
                    user = speak(q.question, args.voice, tail_s=args.tail)
                    in_wav = out / "audio" / f"{q.id}.in.wav"
                    write_mono(in_wav, user)
                    for mode, policy in variants:
                        label = f"{mode}[{policy}]" if policy and len(policies) > 1 else mode
                        stem = f"{q.id}.{mode}-{policy}" if policy and len(policies) > 1 else f"{q.id}.{mode}"
                        rec: dict[str, Any] = {"question_id": q.id, "mode": mode, "variant": label, "policy": policy,
                                               "question": q.question, "answers": q.answers, "input_wav": str(in_wav)}
                        try:
                            res = run_session(stack, InputAudio(user, 24000, 1), session_config(mode),
                                              front_end_name=args.front_end,
                                              front_end_kwargs={**fe_kwargs, **front_end_options(mode)},
                                              oracle_policy=policy or DEFAULT_POLICY,
                                              meta={"input": str(in_wav), "question_id": q.id})
                            out_wav = out / "audio" / f"{stem}.wav"
                            tl_path = out / "timelines" / f"{stem}.json"
                            png = out / "timelines" / f"{stem}.png"
                            write_outputs(res, out_wav, tl_path, png)
                            rec.update(score_run(res.timeline.to_dict(), user, res.assistant, q, transcriber))
                            rec.update({"output_wav": str(out_wav), "timeline": str(tl_path), "plot": str(png)})
                        except TandemError:
                            raise
                        except Exception as e:  # noqa: BLE001 - one failed run must not end the benchmark
                            log.exception("run %s/%s failed", q.id, label)
                            rec.update({"failed": True, "error": f"{type(e).__name__}: {e}", "correct": False})
                        runs.append(rec)
        finally:
            if load:
                load.__exit__(None, None, None)
    summary = summarize_runs(runs)
    extra = {"questions": len(questions), "voice": args.voice, "policy": args.policy,
             "checkpoint": str(checkpoint) if checkpoint is not None else "shipped",
             "peak_rss_mb_all_processes": round(mem.peak_mb, 1), "wall_s": round(time.time() - t_start, 1),
             "llm": stack.llm_config.endpoint if stack.llm_config else None, "llm_load": bool(load)}
    if load:
        extra["llm_load_tokens"] = load.tokens
    pairs = paired_answers(runs)
    report(out, {"runs": runs, "summary": summary, "pairs": pairs, "meta": extra},
           lambda p: write_summary_md(p, summary, extra, pairs, runs), "latency.png", lambda p: plot_latencies(p, runs))
    return 0
