"""`tandem bench`: the same spoken questions through each mode, paced in real time, scored.

Each question is spoken by a test voice (not the assistant's), padded with silence, written to
DIR/audio, and the very same file goes through every mode. The assistant channel is transcribed
with word times to find the answer; latencies are measured from the end of the user's speech
in the input signal.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from .audio import AUDIBLE, InputAudio, write_mono
from .copying import copied_exactly, cut_short, last_oracle_text
from .errors import TandemError
from .metrics import count_causes, summarize
from .oracle import DEFAULT_POLICY, make_policy
from .runner import run_session, write_outputs
from .scoring import Transcriber, find_answer, hear, listening_context, onset_after, response_gaps, speech_end_of
from .scheduler import SchedulerConfig
from .session import SessionConfig
from .stack import Stack, stack_config

log = logging.getLogger(__name__)

NUMERIC = ["onset_s", "answer_s", "gap_max_s", "final_latency_s", "vad_end_delay_s", "partial_stale_median_s", "llm_ttft_s",
           "tts_first_audio_s", "late_p50_ms", "late_p99_ms", "step_p50_ms", "step_p99_ms", "starts", "cancels",
           "adoptions", "oracle_tokens_fed", "oracle_resets", "oracle_restarts", "oracle_kept"]


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answers: list[str]


T = TypeVar("T")


def read_jsonl(path: Path, what: str, parse: Callable[[dict[str, Any]], T], shape: str) -> list[T]:
    """One `parse(object)` per non-empty line of a JSONL file; a bad line is a one-line error that
    names the file, the line and the `shape` expected; an empty file is an error too."""
    if not path.exists():
        raise TandemError(f"{what} file not found: {path}")
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(parse(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise TandemError(f"{path}:{i}: not {shape} ({e})") from None
    if not out:
        raise TandemError(f"no {what} in {path}")
    return out


def load_questions(path: Path, limit: int | None, stride: int = 1) -> list[Question]:
    out = read_jsonl(path, "questions", lambda o: Question(str(o["id"]), str(o["question"]),
                                                          [str(a) for a in o["answers"]]),
                     "a question object with id, question, answers")
    out = out[:: max(1, stride)]  # every stride-th question: a spread over a file grouped by topic
    return out[:limit] if limit else out


# bench-only variants of a mode, compared side by side with it: name -> (mode, settings of the session
# or of its scheduler)
MODE_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "tandem-no-opening": ("tandem", {"restate": False}),  # no restated opening (tandem/restate.py)
    "tandem-long-opening": ("tandem", {"short_opening_ttft_s": 0.0}),  # the subject always said again in full
    # with --knowledge: the same run without the documents, and the tandem without direct answers
    "tandem-no-knowledge": ("tandem", {"knowledge": False}),
    "cascade-no-knowledge": ("cascade", {"knowledge": False}),
    "tandem-no-extractive": ("tandem", {"extractive": False}),
    # each turn asked as heard: no follow-up fragment resolved, no lead-in dropped (tandem/followup.py)
    "tandem-as-heard": ("tandem", {"standalone": False}),
    "cascade-as-heard": ("cascade", {"standalone": False}),
    # KAME's first start: a partial of 2 words already starts a stream (this project waits for 3)
    "tandem-kame-start": ("tandem", {"min_turn_words": 2}),
    # an opening's subject of up to five words said again in full even when the LLM answers soon (the rule
    # before 2026-12-03: "The capital of Australia is Canberra." where the tandem now says "It is Canberra.")
    "tandem-subject-opening": ("tandem", {"short_opening_words": 5}),
    # the user's voice activity as the Listener process reports it, one or two frames after the audio (the rule
    # before 2026-12-03's third round; listener/frame_vad.py measures it in the frame loop)
    "tandem-listener-vad": ("tandem", {"frame_vad": False}),
    "cascade-listener-vad": ("cascade", {"frame_vad": False}),
    # the voice handed only the rest of a copied word, the next word waiting for the front-end model (the rule
    # before 2026-12-03's fourth round; frontends/compact/decoding.py, `voice_ahead`)
    "tandem-no-voice-ahead": ("tandem", {"voice_ahead": False}),
    # the model alone decides its turn until 12 quiet frames have passed, even with the final's answer in the
    # oracle (the rule before 2026-12-04; frontends/compact/decoding.py, `turn_due`)
    "tandem-no-settled-turn": ("tandem", {"settled_turn": False}),
    # the oracle settled by the final transcript only, not by a whole sentence heard as the user paused (the rule
    # before 2026-12-04's eighth round; scheduler.py, `settle_on_pause`)
    "tandem-no-settle-on-pause": ("tandem", {"settle_on_pause": False}),
}


def session_config(mode: str) -> SessionConfig:
    """The session settings of a --modes entry: a mode, or one of MODE_VARIANTS."""
    base, settings = MODE_VARIANTS.get(mode, (mode, {}))
    session_fields = {f.name for f in dataclasses.fields(SessionConfig)}
    sched_fields = {f.name for f in dataclasses.fields(SchedulerConfig)}
    sched = {k: v for k, v in settings.items() if k in sched_fields}
    own = {k: v for k, v in settings.items() if k in session_fields}
    return SessionConfig(mode=base, scheduler=dataclasses.replace(SchedulerConfig(), **sched), **own)


def front_end_options(mode: str) -> dict[str, Any]:
    """The settings of a MODE_VARIANTS entry that are the front-end's (the rest are the session's)."""
    settings = MODE_VARIANTS.get(mode, (mode, {}))[1]
    known = {f.name for f in dataclasses.fields(SessionConfig)} | {f.name for f in dataclasses.fields(SchedulerConfig)}
    return {k: v for k, v in settings.items() if k not in known}


def base_mode(mode: str) -> str:
    return MODE_VARIANTS.get(mode, (mode, {}))[0]


def modes_and_policies(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """--modes and --policy as lists, checked before any audio is made."""
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if base_mode(m) not in ("tandem", "frontend", "cascade"):
            raise TandemError(f"unknown mode {m!r} in --modes (modes: tandem, frontend, cascade; variants: "
                              f"{', '.join(MODE_VARIANTS)})")
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for p in policies:
        make_policy(p)  # an unknown name fails before any audio is made
    return modes, policies


def output_dir(path: Path) -> Path:
    """The bench's output folder, with its audio/ and timelines/ made."""
    out = path.resolve()
    (out / "audio").mkdir(parents=True, exist_ok=True)
    (out / "timelines").mkdir(exist_ok=True)
    return out


class MemorySampler:
    """Peak resident memory of this process and the stack's processes, summed, sampled every 0.25 s."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self._procs = [psutil.Process(p) for p in pids]
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            total = 0
            for p in self._procs:
                try:
                    total += p.memory_info().rss
                except Exception:  # noqa: BLE001 - a process that ended counts as zero
                    pass
            self.peak_mb = max(self.peak_mb, total / 2**20)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class LLMLoad:
    """Keeps a second embedded LLM server generating back to back, to measure the Listener under load."""

    def __init__(self) -> None:
        from .llm.local_server import LocalLlamaServer

        self.server = LocalLlamaServer()
        self._stop = threading.Event()
        self.tokens = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import httpx

        body = {"model": self.server.model, "stream": True, "max_tokens": 200,
                "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]}
        while not self._stop.is_set():
            try:
                with httpx.stream("POST", f"{self.server.url}/chat/completions", json=body, timeout=30) as r:
                    for line in r.iter_lines():
                        if self._stop.is_set():
                            break
                        if line.startswith("data:") and "content" in line:
                            self.tokens += 1
            except Exception:  # noqa: BLE001 - the load is best effort
                time.sleep(0.2)

    def __enter__(self) -> "LLMLoad":
        self.server.start()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.server.stop()


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
    }


def copy_judgement(said: str, oracle: str, assistant: np.ndarray) -> bool | None:
    exact = copied_exactly(said, oracle)
    still_talking = bool(len(assistant)) and float(np.max(np.abs(assistant[-int(0.3 * 24000):]))) > AUDIBLE
    if exact is False and still_talking and cut_short(said, oracle):
        return None  # the recording cut the reply, not the front-end: nothing to judge
    return exact


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(float(np.median(xs)), 4) if xs else None


def variant_of(run: dict[str, Any]) -> str:
    """The column a run belongs to: its mode, or mode[policy] when policies are compared."""
    return run.get("variant") or run["mode"]


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
                     pairs: list[dict[str, Any]] | None = None) -> None:
    keys = ["runs", "failed", "correct_rate", "onset_s_median", "answer_s_median", "final_latency_s_median",
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
        from .bench_dialogues import run_dialogue_bench

        return run_dialogue_bench(args)
    from tqdm import tqdm

    from .voices import speak

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
        from . import frontend

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
    (out / "results.json").write_text(json.dumps({"runs": runs, "summary": summary, "pairs": pairs, "meta": extra},
                                                 indent=1))
    write_summary_md(out / "summary.md", summary, extra, pairs)
    plot_latencies(out / "latency.png", runs)
    print((out / "summary.md").read_text())
    print(f"results: {out / 'results.json'}")
    return 0
