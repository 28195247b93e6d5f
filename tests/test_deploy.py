"""Past one machine: two `tandem serve` instances behind HAProxy (deploy/haproxy.cfg), sharing one LLM
service (`tandem llm-server`). Clients go through the balancer; one instance is killed; the balancer's
health check marks it down and new sessions go to the other. Everything is started as a user would.
"""
from __future__ import annotations

import asyncio
import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tandem.llm.local_server import free_port
from tandem.server.client import ProtocolClient
from tandem.audio.voices import speak

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("haproxy") is None,
                                 reason="needs Debian's haproxy (apt-get install haproxy; make system-deps installs it)")]
ROOT = Path(__file__).resolve().parent.parent


def start(cmd: list[str], ready: str, timeout_s: float = 180.0, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if ready in line:
            return proc
        if not line and proc.poll() is not None:
            raise AssertionError(f"{cmd[:4]} did not start: {proc.stderr.read()[-600:]}")
    proc.kill()
    raise AssertionError(f"{cmd[:4]} did not start within {timeout_s} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def balancer_states(stats_port: int) -> dict[str, str]:
    r = httpx.get(f"http://127.0.0.1:{stats_port}/;csv", timeout=2.0)
    rows = csv.DictReader(io.StringIO(r.text.lstrip("# ")))
    return {row["svname"]: row["status"] for row in rows if row["pxname"] == "tandem_servers"}


def sessions_total(port: int) -> int:
    return httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=5.0).json()["sessions_total"]


async def ask(c: ProtocolClient, audio) -> ProtocolClient:  # noqa: ANN001
    await c.speak(audio)
    await c.close()
    return c


async def two_sessions(url: str, audio) -> list[ProtocolClient]:  # noqa: ANN001
    """Two sessions that talk at once. They connect one after the other: least connections can only
    spread sessions that the balancer already counts, and two upgrades racing through HAProxy's two
    threads may both see an empty instance (CI once sent both to one)."""
    first = await ProtocolClient(url, events=True).connect(timeout_s=60)
    second = await ProtocolClient(url, events=True).connect(timeout_s=60)
    return list(await asyncio.gather(ask(first, audio), ask(second, audio)))


def test_two_servers_behind_haproxy_and_one_dies(tmp_path):
    llm_port, p1, p2, lb, stats = (free_port() for _ in range(5))
    procs: list[subprocess.Popen] = []
    try:
        procs.append(start([sys.executable, "-m", "tandem", "llm-server", "--port", str(llm_port)], "LLM server on"))
        llm = f"http://127.0.0.1:{llm_port}/v1"
        servers = {}
        for port in (p1, p2):
            servers[port] = start([sys.executable, "-m", "tandem", "serve", "--port", str(port), "--max-sessions", "2",
                                   "--llm-url", llm, "--llm-model", "smollm2-135m-instruct"], "serving on")
            procs.append(servers[port])
        env = {**os.environ, "TANDEM_LB_BIND": f"127.0.0.1:{lb}", "TANDEM_SERVE_1": f"127.0.0.1:{p1}",
               "TANDEM_SERVE_2": f"127.0.0.1:{p2}", "TANDEM_LB_STATS": f"127.0.0.1:{stats}"}
        haproxy = subprocess.Popen(["haproxy", "-f", str(ROOT / "deploy" / "haproxy.cfg"), "-db"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(haproxy)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if set(balancer_states(stats).values()) == {"UP"}:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert balancer_states(stats) == {"s1": "UP", "s2": "UP", "BACKEND": "UP"}
        url = f"http://127.0.0.1:{lb}"
        q = speak("What is the capital of France?", "festival", lead_s=0.3, tail_s=4.0)

        clients = asyncio.run(two_sessions(url, q))
        for c in clients:
            assert c.got.pages > 20 and "".join(c.got.texts).strip(), "each session heard an answer through the balancer"
        assert (sessions_total(p1), sessions_total(p2)) == (1, 1), "least connections: one session each"

        servers[p1].kill()  # the instance dies outright, its sessions with it
        servers[p1].wait()
        t0 = time.monotonic()
        # the state goes UP -> "UP 1/2" (one failed check of the two that mark it down) -> DOWN
        while not balancer_states(stats)["s1"].startswith("DOWN") and time.monotonic() - t0 < 10:
            time.sleep(0.2)
        marked_down_s = time.monotonic() - t0
        assert balancer_states(stats)["s1"].startswith("DOWN"), balancer_states(stats)
        assert marked_down_s < 5, f"the health check took {marked_down_s:.1f} s to see the dead instance"

        clients = asyncio.run(two_sessions(url, q))
        for c in clients:
            assert c.got.pages > 20 and "".join(c.got.texts).strip(), "new sessions are served by the survivor"
        assert sessions_total(p2) == 3, "both new sessions went to the instance still up"
        health = httpx.get(f"http://127.0.0.1:{p2}/api/health", timeout=5.0)
        assert health.status_code == 200 and health.json()["ready"]
    finally:
        for p in reversed(procs):
            stop(p)
