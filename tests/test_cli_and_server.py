"""The real embedded LLM server's life cycle, and the CLI's handling of bad input and interrupts."""
import asyncio
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import soundfile as sf

from tandem.llm.client import ChatClient, LLMConfig
from tandem.llm.local_server import LocalLlamaServer

TANDEM = [sys.executable, "-m", "tandem"]


def test_embedded_llm_server_answers_and_stops():
    with LocalLlamaServer() as srv:
        pid = srv.pid
        assert psutil.pid_exists(pid)

        async def ask():
            client = ChatClient(LLMConfig(url=srv.url, model=srv.model, max_tokens=20))
            try:
                return "".join([d async for d in client.stream([{"role": "user", "content": "Say hello."}])])
            finally:
                await client.aclose()

        text = asyncio.run(ask())
        assert text.strip()
    time.sleep(0.2)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*TANDEM, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("content, expect", [
    (None, "not found"),
    (b"", "cannot read"),
    (b"not audio at all", "cannot read"),
    ("silent", "silent"),
])
def test_bad_input_gives_one_line_and_nonzero_exit(tmp_path, content, expect):
    p = tmp_path / "in.wav"
    if content == "silent":
        sf.write(p, np.zeros(24000, np.float32), 24000)
    elif content is not None:
        p.write_bytes(content)
    r = run_cli("run", str(p), "--mode", "cascade")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tandem: error:") and expect in lines[0]


def test_tandem_mode_without_a_front_end_fails_clearly(tmp_path):
    p = tmp_path / "in.wav"
    sf.write(p, 0.3 * np.sin(np.arange(24000) / 10).astype(np.float32), 24000)
    r = run_cli("run", str(p), "--mode", "tandem", "--front-end", "no-such-front-end")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "front-end 'no-such-front-end' is not available" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_the_local_llm_server(tmp_path, spoken_question, sig):
    p = tmp_path / "q.wav"
    sf.write(p, np.concatenate([spoken_question] * 3), 24000)
    proc = subprocess.Popen([*TANDEM, "run", str(p), "--mode", "cascade"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    me = psutil.Process(proc.pid)
    server = None
    deadline = time.time() + 60
    while time.time() < deadline and server is None:
        for child in me.children(recursive=True):
            try:
                if "llama-server" in " ".join(child.cmdline()):
                    server = child
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.2)
    assert server is not None, "the embedded server should have been started"
    time.sleep(3.0)  # well into the run
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    server.wait(timeout=10) if server.is_running() else None
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
