"""`tandem loadtest`: N concurrent protocol clients on loopback, each speaking questions in real time.

Each client connects with the event extension, speaks a question (a test voice, not the
assistant's), listens through the silence after it, and repeats with the next question until the
run's time is up. Reported per session: onset latency (end of the user's speech -> first assistant
audio, measured by the client on its own clock from what it sent and received, and by the server on
the session clock), frame deadline misses and input underruns (from the server's stats events),
errors and how the connection ended. Without `--url` a server is started for the run and stopped
after it.
"""
from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from ..errors import TandemError
from ..scoring import speech_end_of
from .client import HandshakeError, ProtocolClient, auth_headers

# questions one session answers: capacity measures load, not what the LLM knows. ("Who wrote Romeo and
# Juliet?" was heard as "ROT Romeo and Juliet" in Festival's voice in every run, so it measured the
# Listener on one voice; "the play" keeps the same question apart from that.)
DEFAULT_QUESTIONS = [
    "What is the capital of France?",
    "Who wrote the play Romeo and Juliet?",
    "What is the largest planet in the solar system?",
    "How many legs does a spider have?",
]
DEFAULT_ANSWERS = [["paris"], ["shakespeare"], ["jupiter"], ["eight", "8"]]
ANSWER_WINDOW_S = 4.0  # an answer counts when its word is heard this soon after the end of the question
# the word the compact front-end says before it takes back what it began ("It is New sorry, It is Paris."): a
# turn whose text has it was repaired, what a listener hears as a wrong start
REPAIR_WORD = re.compile(r"\bsorry\b", re.IGNORECASE)


def repaired(turn_texts: list[str]) -> int:
    """How many of these turns' replies took back what they began."""
    return sum(1 for x in turn_texts if REPAIR_WORD.search(x))

# what users hear at capacity (issue 16, ARCHITECTURE "capacity"): every one must hold
TARGETS = {"onset_client_median_s": 0.5, "onset_client_p95_s": 0.8, "answered_pct": 95.0}


@dataclass
class SessionReport:
    index: int
    turns: int = 0
    onsets_client_s: list[float] = field(default_factory=list)
    onsets_server_s: list[float] = field(default_factory=list)
    unanswered: int = 0
    deadline_misses: int = 0
    frames: int = 0
    late_p99_ms: float = 0.0
    underruns: int = 0
    input_lag_ms: float = 0.0  # median audio waiting in the server's input buffer (from its stats)
    pages: int = 0
    errors: list[str] = field(default_factory=list)
    close_code: int | None = None
    said: str = ""
    answers_heard_s: list[float | None] = field(default_factory=list)  # per turn: answer word after the question's end
    turn_audio: list[np.ndarray] = field(default_factory=list, repr=False)  # per turn, what came back (not saved)
    turn_questions: list[int] = field(default_factory=list)  # per turn, which question was spoken
    turn_texts: list[str] = field(default_factory=list)  # per turn, the assistant's text from its question's end on


def questions_and_answers(path: Path | None, limit: int | None) -> list[tuple[str, list[str]]]:
    """The questions to speak and their accepted answers: `tandem bench`'s question file (read by its
    loader), else a few defaults."""
    if path is None:
        pairs = list(zip(DEFAULT_QUESTIONS, DEFAULT_ANSWERS))
        return pairs[:limit] if limit else pairs
    from ..bench import load_questions  # here, not at the top: bench pulls in the whole stack

    return [(q.question, q.answers) for q in load_questions(path, limit)]


async def _one_session(i: int, url: str, token: str | None, audios: list[np.ndarray], ends: list[float],
                       until: float, start_delay: float) -> SessionReport:
    rep = SessionReport(i)
    await asyncio.sleep(start_delay)
    try:
        c = await ProtocolClient(url, token=token, events=True).connect(timeout_s=60)
    except HandshakeError as e:
        rep.errors.append(f"connect: {e}")
        return rep
    try:
        q = i
        while time.perf_counter() + len(audios[q % len(audios)]) / 24000 <= until and not c.closed.is_set():
            audio, end = audios[q % len(audios)], ends[q % len(audios)]
            n_lat = len(c.got.of_type("latency"))
            start = await c.speak(audio)
            rep.turns += 1
            spoken_end = start + end
            first = c.first_audible_after(spoken_end)
            if first is None:
                rep.unanswered += 1
            else:
                rep.onsets_client_s.append(round(first - spoken_end, 3))
            rep.onsets_server_s += [e["onset_s"] for e in c.got.of_type("latency")[n_lat:]][:1]
            rep.turn_questions.append(q % len(audios))
            rep.turn_audio.append(_heard_after(c, spoken_end, ANSWER_WINDOW_S + 1.0))
            rep.turn_texts.append(_said_after(c, spoken_end, ANSWER_WINDOW_S + 1.0))
            q += 1
        await asyncio.sleep(0.3)
    finally:
        stats = c.got.of_type("stats")
        if stats:
            rep.deadline_misses, rep.frames = stats[-1]["deadline_misses"], stats[-1]["frames"]
            rep.late_p99_ms, rep.underruns = stats[-1]["late_p99_ms"], stats[-1]["underruns"]
            rep.input_lag_ms = stats[-1].get("input_lag_ms", 0.0)
        rep.pages = c.got.pages
        rep.errors += c.got.errors
        rep.said = "".join(c.got.texts).strip()[:200]
        await c.close()
        rep.close_code = c.close_code
    return rep


def _heard_after(c: ProtocolClient, t: float, window_s: float) -> np.ndarray:
    """The assistant audio that arrived in [t, t + window_s), as one signal (the server sends a frame
    every 80 ms, so arrival order is play order). Audio still on its way when the next question starts
    is cut there, as a listener who asks again hears it."""
    chunks = [pcm for at, pcm in zip(c.got.audio_t, c.got.audio) if t <= at < t + window_s]
    return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)


def _said_after(c: ProtocolClient, t: float, window_s: float) -> str:
    """The assistant's text that arrived in [t - 0.5 s, t + window_s): a reply begun as the user paused
    belongs to the turn."""
    return "".join(x for at, x in zip(c.got.texts_t, c.got.texts) if t - 0.5 <= at < t + window_s).strip()


def score_answers(reports: list[SessionReport], answers: list[list[str]], transcriber=None,  # noqa: ANN001
                  questions: list[str] | None = None) -> None:
    """Transcribe what each turn got back and note when its answer word was heard (None: not heard).
    `questions`: what each turn asked, the listener's context (scoring.listening_context)."""
    from ..scoring import Transcriber, find_answer, hear, listening_context

    transcriber = transcriber or Transcriber()
    for r in reports:
        r.answers_heard_s = []
        for audio, qi in zip(r.turn_audio, r.turn_questions):
            context = listening_context(questions[qi], answers[qi]) if questions else None
            hit = find_answer(hear(transcriber, audio, answers[qi], context), answers[qi]) if len(audio) else None
            r.answers_heard_s.append(round(hit.start, 3) if hit else None)


def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """Whether the run is at single-session quality, measure by measure (all must pass)."""
    checks = {
        f"client onset median <= {TARGETS['onset_client_median_s']} s":
            summary["onset_client_median_s"] is not None and summary["onset_client_median_s"] <= TARGETS["onset_client_median_s"],
        f"client onset p95 <= {TARGETS['onset_client_p95_s']} s":
            summary["onset_client_p95_s"] is not None and summary["onset_client_p95_s"] <= TARGETS["onset_client_p95_s"],
        f">= {TARGETS['answered_pct']:g}% of turns answered within {ANSWER_WINDOW_S:g} s":
            summary["answered_pct"] is not None and summary["answered_pct"] >= TARGETS["answered_pct"],
        "0 deadline misses": summary["deadline_misses"] == 0,
        "0 input underruns": summary["underruns"] == 0,
        "0 errors": summary["errors"] == 0,
    }
    return {"pass": all(checks.values()), "checks": checks}


def _p95(xs: list[float]) -> float | None:
    return round(float(np.percentile(xs, 95)), 3) if xs else None


async def run_clients(url: str, sessions: int, duration_s: float, audios: list[np.ndarray], token: str | None = None,
                      stagger_s: float = 0.5) -> tuple[list[SessionReport], dict[str, Any] | None]:
    ends = [speech_end_of(a) or len(a) / 24000 for a in audios]
    until = time.perf_counter() + duration_s
    reports = await asyncio.gather(*(_one_session(i, url, token, audios, ends, until, i * stagger_s)
                                     for i in range(sessions)))
    status = None
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url.rstrip("/") + "/api/status", headers=auth_headers(token)) as r:
                if r.status == 200:
                    status = await r.json()
    except aiohttp.ClientError:
        pass
    return list(reports), status


def summarize(reports: list[SessionReport], status: dict[str, Any] | None) -> dict[str, Any]:
    client = [x for r in reports for x in r.onsets_client_s]
    server = [x for r in reports for x in r.onsets_server_s]
    heard = [x for r in reports for x in r.answers_heard_s]
    in_time = [x for x in heard if x is not None and x <= ANSWER_WINDOW_S]
    texts = [x for r in reports for x in r.turn_texts]
    return {
        "sessions": len(reports),
        "turns": sum(r.turns for r in reports),
        "unanswered": sum(r.unanswered for r in reports),
        "answers_judged": len(heard),
        "answered_pct": round(100 * len(in_time) / len(heard), 1) if heard else None,
        "answer_heard_median_s": round(statistics.median(in_time), 3) if in_time else None,
        "repaired_pct": round(100 * repaired(texts) / len(texts), 1) if texts else None,
        "onset_client_median_s": round(statistics.median(client), 3) if client else None,
        "onset_client_p95_s": _p95(client),
        "onset_client_max_s": round(max(client), 3) if client else None,
        "onset_server_median_s": round(statistics.median(server), 3) if server else None,
        "deadline_misses": sum(r.deadline_misses for r in reports),
        "frames": sum(r.frames for r in reports),
        "late_p99_ms_worst": max((r.late_p99_ms for r in reports), default=0.0),
        "underruns": sum(r.underruns for r in reports),
        "input_lag_ms_max": max((r.input_lag_ms for r in reports), default=0.0),
        "errors": sum(len(r.errors) for r in reports),
        "server": status,
    }


class CpuMeter:
    """CPU use during the run: this load test and the server (with its Listener and LLM processes)
    against everything else on the machine, so a figure taken on a busy machine says so."""

    def __init__(self, server_pid: int | None) -> None:
        import psutil

        self.psutil = psutil
        self.pids = ([server_pid] if server_pid else []) + [os.getpid()]  # the server's tree first: it is also ours
        self.t0 = time.monotonic()
        self.sys0 = self._busy_total()
        self.steal0 = self._steal()
        self.own0 = self._own()

    def _busy_total(self) -> float:
        c = self.psutil.cpu_times()
        return c.user + c.nice + c.system + getattr(c, "irq", 0.0) + getattr(c, "softirq", 0.0) + getattr(c, "steal", 0.0)

    def _steal(self) -> float:
        """The machine's CPU time the hypervisor gave to others so far (Linux only; 0 elsewhere)."""
        return getattr(self.psutil.cpu_times(), "steal", 0.0)

    def _own(self) -> dict[int, float]:
        out: dict[int, float] = {}
        self.roles: dict[int, str] = getattr(self, "roles", {})
        for pid in self.pids:
            try:
                root = self.psutil.Process(pid)
                for proc in [root] + root.children(recursive=True):
                    t = proc.cpu_times()
                    out[proc.pid] = t.user + t.system
                    if proc.pid not in self.roles:
                        self.roles[proc.pid] = self._role(proc, pid == os.getpid(), proc.pid == pid)
            except self.psutil.Error:
                pass
        return out

    @staticmethod
    def _role(proc, is_loadtest: bool, is_root: bool) -> str:  # noqa: ANN001
        if is_loadtest and is_root:
            return "clients"
        if is_root:
            return "server"
        try:
            cmd = " ".join(proc.cmdline())
        except Exception:  # noqa: BLE001 - gone already
            return "other"
        if "llama-server" in cmd:  # the embedded LLM
            return "llm"
        if "multiprocessing" in cmd:
            return "listener+voice"  # spawned workers: the Listener and the voice process
        return "voices" if is_loadtest else "other"

    def report(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        own1 = self._own()
        own = sum(v - self.own0.get(pid, 0.0) for pid, v in own1.items())
        total = self._busy_total() - self.sys0
        by_role: dict[str, float] = {}
        for pid, v in own1.items():
            role = self.roles.get(pid, "other")
            by_role[role] = by_role.get(role, 0.0) + (v - self.own0.get(pid, 0.0)) / wall
        return {"wall_s": round(wall, 1), "cores": self.psutil.cpu_count(),
                "ours_cores": round(own / wall, 2), "others_cores": round(max(0.0, total - own) / wall, 2),
                "ours_by_role": {k: round(v, 2) for k, v in sorted(by_role.items())},
                # of "others": the hypervisor running other machines on our cores (a virtual machine's stalls)
                "steal_cores": round((self._steal() - self.steal0) / wall, 3)}


class ServerLog:
    """What the server started for a run writes, read as it comes. (Left in a pipe nobody reads, a
    server that logs a fault over and over fills the pipe in seconds and its frame loop stops on the
    next write.) Kept: the last lines, the errors counted, and all of it in `path` when given."""

    ERROR = re.compile(r"\b(ERROR|CRITICAL)\b|^Traceback ")

    def __init__(self, proc: subprocess.Popen, path: Path | None = None) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self.errors = 0
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w") if path else None
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._drain, args=(proc.stderr,), daemon=True, name="server-log")]
        for t in self._threads:
            t.start()

    def drain_too(self, stream) -> None:  # noqa: ANN001 - a text pipe
        t = threading.Thread(target=self._drain, args=(stream,), daemon=True, name="server-out")
        self._threads.append(t)
        t.start()

    def _drain(self, stream) -> None:  # noqa: ANN001
        for line in stream:
            with self._lock:
                self.tail.append(line.rstrip("\n"))
                self.errors += bool(self.ERROR.search(line))
                if self._file:
                    self._file.write(line)

    def close(self) -> None:
        for t in self._threads:
            t.join(timeout=5)
        if self._file:
            self._file.close()


def _spawn_server(args, sessions: int) -> tuple[subprocess.Popen, str, ServerLog]:  # noqa: ANN001
    from ..llm.local_server import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "tandem", "serve", "--port", str(port), "--max-sessions", str(sessions),
           "--mode", args.mode]
    if args.llm_url:
        cmd += ["--llm-url", args.llm_url] + (["--llm-model", args.llm_model] if args.llm_model else [])
    if args.record:
        cmd += ["--record", str(args.record)]
    cmd += list(getattr(args, "server_arg", None) or [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = ServerLog(proc, args.record / f"server-{sessions}.log" if args.record else None)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            log.close()
            raise TandemError("the server did not start: " + " | ".join(list(log.tail)[-6:])[-400:])
        m = re.search(r"serving on (http://\S+?)/ ", line)
        if m:
            log.drain_too(proc.stdout)
            return proc, m.group(1), log
    proc.terminate()
    log.close()
    raise TandemError("the server did not start within 180 s")


def parse_session_counts(text: str) -> list[int]:
    """--sessions: one count, or several ("1,2,4,6") for a capacity sweep."""
    try:
        counts = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise TandemError(f"--sessions takes a number or numbers with commas (1,2,4,6), not {text!r}") from None
    if not counts or any(n < 1 or n > 64 for n in counts):
        raise TandemError("--sessions must be between 1 and 64")
    return sorted(set(counts))


def _one_run(args, n: int, audios: list[np.ndarray], qa: list[tuple[str, list[str]]], transcriber) -> tuple[dict, list]:  # noqa: ANN001
    proc = server_log = None
    url = args.url
    try:
        if url is None:
            proc, url, server_log = _spawn_server(args, n)
        meter = CpuMeter(proc.pid if proc else None)
        reports, status = asyncio.run(run_clients(url, n, args.duration, audios, args.token))
        cpu = meter.report()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if server_log is not None:
            server_log.close()
            if server_log.errors:
                print(f"the server logged {server_log.errors} errors; its last lines:", file=sys.stderr)
                print("\n".join(server_log.tail), file=sys.stderr)
    # after the run: transcribing is not part of the load
    score_answers(reports, [a for _, a in qa], transcriber, [q for q, _ in qa])
    summary = summarize(reports, status)
    summary["cpu"] = cpu
    if server_log is not None:
        summary["server_log_errors"] = server_log.errors
    summary["verdict"] = verdict(summary)
    return summary, reports


def _print_sessions(reports: list[SessionReport]) -> None:
    print(f"{'session':>7} {'turns':>5} {'onset med (client)':>18} {'onset med (server)':>18} {'answered':>8} "
          f"{'repaired':>8} {'misses':>6} {'late p99':>8} {'underruns':>9} {'input lag':>9} {'errors':>6}")
    for r in reports:
        oc = f"{statistics.median(r.onsets_client_s):.2f} s" if r.onsets_client_s else "-"
        os_ = f"{statistics.median(r.onsets_server_s):.2f} s" if r.onsets_server_s else "-"
        ans = f"{sum(1 for x in r.answers_heard_s if x is not None and x <= ANSWER_WINDOW_S)}/{len(r.answers_heard_s)}"
        fixed = f"{repaired(r.turn_texts)}/{len(r.turn_texts)}"
        print(f"{r.index:>7} {r.turns:>5} {oc:>18} {os_:>18} {ans:>8} {fixed:>8} {r.deadline_misses:>6} {r.late_p99_ms:>6.1f}ms "
              f"{r.underruns:>9} {r.input_lag_ms:>7.0f}ms {len(r.errors):>6}")


def capacity_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| sessions | client onset median | p95 | answered in 4 s | turns repaired | deadline misses | underruns | "
             "errors | CPU (cores, ours / others) | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        failed = [k for k, ok in s["verdict"]["checks"].items() if not ok]
        lines.append(f"| {s['sessions']} | {s['onset_client_median_s']} s | {s['onset_client_p95_s']} s | "
                     f"{s['answered_pct']}% | {s.get('repaired_pct')}% | {s['deadline_misses']} | {s['underruns']} | {s['errors']} | "
                     f"{s['cpu']['ours_cores']} / {s['cpu']['others_cores']} | "
                     f"{'pass' if s['verdict']['pass'] else 'fail: ' + '; '.join(failed)} |")
    return "\n".join(lines)


def capacity_of(rows: list[dict[str, Any]]) -> int:
    """The largest session count at which this run and every smaller one passed (0: none did)."""
    cap = 0
    for s in sorted(rows, key=lambda r: r["sessions"]):
        if not s["verdict"]["pass"]:
            break
        cap = s["sessions"]
    return cap


def run_loadtest(args) -> int:  # noqa: ANN001
    from ..scoring import Transcriber
    from ..voices import speak

    counts = parse_session_counts(args.sessions)
    if args.duration <= 0 or args.duration > 3600:
        raise TandemError("--duration must be between 0 and 3600 seconds")
    qa = questions_and_answers(args.questions, args.limit)
    audios = [speak(q, args.voice, lead_s=0.5, tail_s=args.tail) for q, _ in qa]
    transcriber = Transcriber()
    rows, all_reports = [], {}
    for n in counts:
        summary, reports = _one_run(args, n, audios, qa, transcriber)
        rows.append(summary)
        all_reports[n] = reports
        print(f"== {n} session(s)")
        _print_sessions(reports)
        print(json.dumps({k: v for k, v in summary.items() if k != "server"}))
        if summary["cpu"]["others_cores"] > 0.25:
            print(f"note: other work used {summary['cpu']['others_cores']} of {summary['cpu']['cores']} cores during "
                  f"the run; capacity figures from a busy machine are pessimistic", file=sys.stderr)
    print(capacity_table(rows))
    cap = capacity_of(rows)
    if len(counts) > 1:
        print(f"capacity: {cap} session(s) at single-session quality (of {', '.join(map(str, counts))} tried)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        out = {"runs": [{"summary": s, "sessions": [
                   {k: v for k, v in asdict(r).items() if k != "turn_audio"} for r in all_reports[s["sessions"]]]}
                        for s in rows],
               "capacity": cap, "targets": TARGETS,
               "args": {"sessions": counts, "duration": args.duration, "mode": args.mode, "voice": args.voice,
                        "server_args": list(getattr(args, "server_arg", None) or [])}}
        if len(rows) == 1:  # the layout single runs always had
            out["summary"], out["sessions"] = rows[0], out["runs"][0]["sessions"]
        args.out.write_text(json.dumps(out, indent=1))
        print(f"results: {args.out}")
    if len(counts) > 1:
        return 0  # a sweep is a measurement: its answer is the table
    s = rows[0]
    ok = s["errors"] == 0 and s["deadline_misses"] == 0 and s["unanswered"] == 0
    return 0 if ok else 1


__all__ = ["run_loadtest", "run_clients", "summarize", "SessionReport"]
