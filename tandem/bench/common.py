"""What every `tandem bench` shares: the question and dialogue files read, the modes and their
variants, the output folder, the memory sampler and the optional LLM load beside the runs."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from ..runtime.errors import TandemError
from ..think.oracle import make_policy
from ..turn.scheduler import SchedulerConfig
from ..turn.session import SessionConfig

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
    "tandem-no-opening": ("tandem", {"restate": False}),  # no restated opening (tandem/think/restate.py)
    "tandem-long-opening": ("tandem", {"short_opening_ttft_s": 0.0}),  # the subject always said again in full
    # with --knowledge: the same run without the documents, and the tandem without direct answers
    "tandem-no-knowledge": ("tandem", {"knowledge": False}),
    "cascade-no-knowledge": ("cascade", {"knowledge": False}),
    "tandem-no-extractive": ("tandem", {"extractive": False}),
    # each turn asked as heard: no follow-up fragment resolved, no lead-in dropped (tandem/think/followup.py)
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
    # silence alone decides the turn: no hold after words that stop inside a clause (the rule before 2026-12-07;
    # turn/unfinished.py)
    "tandem-no-hold": ("tandem", {"hold_unfinished": False, "judge_turn_end": False}),
    "tandem-words-only": ("tandem", {"judge_turn_end": False}),  # the words' hold without the LLM's turn-end judge
    # every word said as the model chooses it, before the answer settles too (frontends/compact/commit.py)
    "tandem-no-commit": ("tandem", {"commit": False}),
    # each pause judged alone, a telling's too: no hold from its second statement on (turn/telling.py)
    "tandem-no-telling": ("tandem", {"hold_telling": False}),
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


def report(out: Path, record: dict[str, Any], write_md: Callable[[Path], None], plot_name: str,
           plot: Callable[[Path], None], note: str = "") -> None:
    """What every bench leaves: results.json (`record`), summary.md (printed) and its plot."""
    (out / "results.json").write_text(json.dumps(record, indent=1))
    write_md(out / "summary.md")
    plot(out / plot_name)
    print((out / "summary.md").read_text())
    print(f"results: {out / 'results.json'}{note}")


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
        from ..llm.local_server import LocalLlamaServer

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

def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(float(np.median(xs)), 4) if xs else None


def variant_of(run: dict[str, Any]) -> str:
    """The column a run belongs to: its mode, or mode[policy] when policies are compared."""
    return run.get("variant") or run["mode"]
