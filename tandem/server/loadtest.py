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
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from ..errors import TandemError
from ..scoring import speech_end_of
from .client import HandshakeError, ProtocolClient, auth_headers

DEFAULT_QUESTIONS = [
    "What is the capital of France?",
    "Who wrote Romeo and Juliet?",
    "What is the largest planet in the solar system?",
    "How many legs does a spider have?",
]


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
    pages: int = 0
    errors: list[str] = field(default_factory=list)
    close_code: int | None = None
    said: str = ""


def question_texts(path: Path | None, limit: int | None) -> list[str]:
    """The questions to speak: `tandem bench`'s question file (read by its loader), else a few defaults."""
    if path is None:
        return DEFAULT_QUESTIONS[:limit] if limit else list(DEFAULT_QUESTIONS)
    from ..bench import load_questions  # here, not at the top: bench pulls in the whole stack

    return [q.question for q in load_questions(path, limit)]


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
            q += 1
        await asyncio.sleep(0.3)
    finally:
        stats = c.got.of_type("stats")
        if stats:
            rep.deadline_misses, rep.frames = stats[-1]["deadline_misses"], stats[-1]["frames"]
            rep.late_p99_ms, rep.underruns = stats[-1]["late_p99_ms"], stats[-1]["underruns"]
        rep.pages = c.got.pages
        rep.errors += c.got.errors
        rep.said = "".join(c.got.texts).strip()[:200]
        await c.close()
        rep.close_code = c.close_code
    return rep


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
    return {
        "sessions": len(reports),
        "turns": sum(r.turns for r in reports),
        "unanswered": sum(r.unanswered for r in reports),
        "onset_client_median_s": round(statistics.median(client), 3) if client else None,
        "onset_client_max_s": round(max(client), 3) if client else None,
        "onset_server_median_s": round(statistics.median(server), 3) if server else None,
        "deadline_misses": sum(r.deadline_misses for r in reports),
        "frames": sum(r.frames for r in reports),
        "late_p99_ms_worst": max((r.late_p99_ms for r in reports), default=0.0),
        "underruns": sum(r.underruns for r in reports),
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
        self.own0 = self._own()

    def _busy_total(self) -> float:
        c = self.psutil.cpu_times()
        return c.user + c.nice + c.system + getattr(c, "irq", 0.0) + getattr(c, "softirq", 0.0) + getattr(c, "steal", 0.0)

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
        if "llama_cpp" in cmd or "llama_main" in cmd:
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
                "ours_by_role": {k: round(v, 2) for k, v in sorted(by_role.items())}}


def _spawn_server(args, sessions: int) -> tuple[subprocess.Popen, str]:  # noqa: ANN001
    from ..llm.local_server import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "tandem", "serve", "--port", str(port), "--max-sessions", str(sessions),
           "--mode", args.mode]
    if args.llm_url:
        cmd += ["--llm-url", args.llm_url] + (["--llm-model", args.llm_model] if args.llm_model else [])
    if args.record:
        cmd += ["--record", str(args.record)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read()
            raise TandemError(f"the server did not start: {err.strip()[-400:]}")
        m = re.search(r"serving on (http://\S+?)/ ", line)
        if m:
            return proc, m.group(1)
    proc.terminate()
    raise TandemError("the server did not start within 180 s")


def run_loadtest(args) -> int:  # noqa: ANN001
    from ..voices import speak

    if args.sessions < 1 or args.sessions > 64:
        raise TandemError("--sessions must be between 1 and 64")
    if args.duration <= 0 or args.duration > 3600:
        raise TandemError("--duration must be between 0 and 3600 seconds")
    questions = question_texts(args.questions, args.limit)
    audios = [speak(q, args.voice, lead_s=0.5, tail_s=args.tail) for q in questions]
    proc = None
    url = args.url
    try:
        if url is None:
            proc, url = _spawn_server(args, args.sessions)
        meter = CpuMeter(proc.pid if proc else None)
        reports, status = asyncio.run(run_clients(url, args.sessions, args.duration, audios, args.token))
        cpu = meter.report()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    summary = summarize(reports, status)
    summary["cpu"] = cpu
    print(f"{'session':>7} {'turns':>5} {'onset med (client)':>18} {'onset med (server)':>18} {'misses':>6} "
          f"{'late p99':>8} {'underruns':>9} {'errors':>6}")
    for r in reports:
        oc = f"{statistics.median(r.onsets_client_s):.2f} s" if r.onsets_client_s else "-"
        os_ = f"{statistics.median(r.onsets_server_s):.2f} s" if r.onsets_server_s else "-"
        print(f"{r.index:>7} {r.turns:>5} {oc:>18} {os_:>18} {r.deadline_misses:>6} {r.late_p99_ms:>6.1f}ms "
              f"{r.underruns:>9} {len(r.errors):>6}")
    print(json.dumps({k: v for k, v in summary.items() if k != "server"}))
    if cpu["others_cores"] > 0.25:
        print(f"note: other work used {cpu['others_cores']} of {cpu['cores']} cores during the run; "
              f"capacity figures from a busy machine are pessimistic", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "sessions": [asdict(r) for r in reports],
                                        "args": {"sessions": args.sessions, "duration": args.duration,
                                                 "mode": args.mode, "voice": args.voice}}, indent=1))
        print(f"results: {args.out}")
    ok = summary["errors"] == 0 and summary["deadline_misses"] == 0 and summary["unanswered"] == 0
    return 0 if ok else 1


__all__ = ["run_loadtest", "run_clients", "summarize", "SessionReport"]
