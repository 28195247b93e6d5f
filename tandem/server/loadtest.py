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
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from ..runtime.errors import TandemError
from ..bench.scoring import speech_end_of
from .client import HandshakeError, ProtocolClient, auth_headers
from .loadtest_report import (ANSWER_WINDOW_S, TARGETS, SessionReport, capacity_of, capacity_table, plot_sweep,
                              print_sessions, summarize, verdict)

# questions the sessions ask, a different one each at every moment: capacity measures load, not what the LLM
# knows, so these are ones the embedded 135M LLM answers in every order the sessions ask them
# (scripts/loadtest_questions_probe.py; the largest planet, asked first, was "Neptune" with no load at all, and
# the Mona Lisa's painter "a woman named Lisa"), and that Whisper hears in Festival's voice ("the opposite of hot" was
# "the opposite of heart": "It is heartbreak."). ("Who wrote Romeo and Juliet?" was heard as "ROT Romeo and
# Juliet" in Festival's voice in every run; "the play" keeps the same question apart from that.)
DEFAULT_QA = [
    ("What is the capital of France?", ["paris"]),
    ("Who wrote the play Romeo and Juliet?", ["shakespeare"]),
    ("What is the capital of Italy?", ["rome"]),
    ("How many legs does a spider have?", ["eight", "8"]),
    ("What is the capital of Japan?", ["tokyo"]),
    ("What color is the sky on a clear day?", ["blue"]),
    ("How many days are in a week?", ["seven", "7"]),
    ("Which planet is known as the red planet?", ["mars"]),
    ("What is the capital of Germany?", ["berlin"]),
    ("What is the boiling point of water in Celsius?", ["100", "hundred"]),
    ("What is the largest ocean on Earth?", ["pacific"]),
    ("What is frozen water called?", ["ice"]),
]


def questions_and_answers(path: Path | None, limit: int | None) -> list[tuple[str, list[str]]]:
    """The questions to speak and their accepted answers: `tandem bench`'s question file (read by its
    loader), else a few defaults."""
    if path is None:
        return DEFAULT_QA[:limit] if limit else list(DEFAULT_QA)
    from ..bench.common import load_questions  # here, not at the top: bench pulls in the whole stack

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
    from ..bench.scoring import Transcriber, find_answer, hear, listening_context

    transcriber = transcriber or Transcriber()
    for r in reports:
        r.answers_heard_s = []
        for audio, qi in zip(r.turn_audio, r.turn_questions):
            context = listening_context(questions[qi], answers[qi]) if questions else None
            hit = find_answer(hear(transcriber, audio, answers[qi], context), answers[qi]) if len(audio) else None
            r.answers_heard_s.append(round(hit.start, 3) if hit else None)


async def run_clients(url: str, sessions: int, duration_s: float, audios: list[np.ndarray], token: str | None = None,
                      stagger_s: float = 0.0) -> tuple[list[SessionReport], dict[str, Any] | None]:
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
        reports, status = asyncio.run(run_clients(url, n, args.duration, audios, args.token,
                                                  stagger_s=getattr(args, "stagger", 0.0)))
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


def run_loadtest(args) -> int:  # noqa: ANN001
    from ..bench.scoring import Transcriber
    from ..audio.voices import speak

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
        print_sessions(reports)
        print(json.dumps({k: v for k, v in summary.items() if k != "server"}))
        if summary["cpu"]["others_cores"] > 0.25:
            print(f"note: other work used {summary['cpu']['others_cores']} of {summary['cpu']['cores']} cores during "
                  f"the run; capacity figures from a busy machine are pessimistic", file=sys.stderr)
    print(capacity_table(rows))
    if getattr(args, "plot", None):
        plot_sweep(rows, args.plot)
        print(f"plot: {args.plot}")
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
                        "stagger": getattr(args, "stagger", 0.0),
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
