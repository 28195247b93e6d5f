"""An LLM that goes away mid-session, on the real stack: `tandem serve --llm-url` in front of a real llama.cpp
llama-server that is killed and started again. The log says so once, each client is told once (0x05), the
session goes on with the front-end alone, and oracles come back with the LLM."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tandem.llm.build import find
from tandem.llm.local_server import MODEL_ALIAS, bundled_model_path, free_port
from tandem.server.client import ProtocolClient
from tandem.server.connection import LLM_AWAY
from tandem.audio.voices import speak

pytestmark = pytest.mark.slow


def _llama_server(port: int) -> subprocess.Popen:
    binary = find()
    assert binary is not None, "make setup installs llama-server"
    proc = subprocess.Popen([str(binary), "-m", str(bundled_model_path()), "--host", "127.0.0.1", "--port", str(port),
                             "-np", "2", "-c", "4096", "-t", "1", "-a", MODEL_ALIAS],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("llama-server did not start")


def test_an_llm_killed_and_restarted_mid_session():
    llm_port, port = free_port(), free_port()
    llm = _llama_server(llm_port)
    server = subprocess.Popen([sys.executable, "-m", "tandem", "serve", "--port", str(port), "--max-sessions", "1",
                               "--llm-url", f"http://127.0.0.1:{llm_port}/v1", "--llm-model", MODEL_ALIAS],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(server.stderr), daemon=True)
    question = speak("What is the capital of France?", "festival", lead_s=0.5, tail_s=4.0)
    second = speak("How many legs does a spider have?", "festival", lead_s=0.5, tail_s=4.0)

    async def main() -> tuple[ProtocolClient, dict[str, int]]:
        nonlocal llm
        c = await ProtocolClient(f"http://127.0.0.1:{port}", events=True).connect(timeout_s=60)
        marks = {}
        await c.speak(question)
        marks["oracles_before"] = len(c.got.of_type("oracle"))
        llm.kill()
        llm.wait()
        await c.speak(second)  # the LLM is gone: the front-end alone
        await c.speak(question)
        marks["errors_down"] = len(c.got.errors)
        marks["pages_down"] = c.got.pages
        llm = await asyncio.to_thread(_llama_server, llm_port)  # back, on the same address
        marks["oracles_back_from"] = len(c.got.of_type("oracle"))
        await c.speak(second)
        await c.speak(question)
        await c.close()
        return c, marks

    try:
        assert "serving on" in server.stdout.readline()
        reader.start()
        c, marks = asyncio.run(main())
        assert server.poll() is None, "the server is alive after the outage"
    finally:
        server.terminate()
        server.wait(timeout=30)
        llm.kill()
        llm.wait()
        reader.join(timeout=5)
    text = "".join(log)
    assert marks["oracles_before"] > 0, "the LLM answered before it was killed"
    assert c.got.errors == [LLM_AWAY], "the client is told once, with one protocol message"
    assert marks["errors_down"] == 1
    assert text.count("stopped answering") == 1, text[-3000:]
    assert text.count("answers again after") == 1, text[-3000:]
    assert "oracle stream" not in text, "no warning per failed request"
    assert "Traceback" not in text
    assert marks["pages_down"] > 100, "the session went on (audio kept coming) while the LLM was away"
    assert len(c.got.of_type("oracle")) > marks["oracles_back_from"], "oracles come back with the LLM"
