"""A wrong --llm-url or --llm-model stops `tandem run` and `tandem serve` at once, with one line and exit 2."""
from __future__ import annotations

import socket
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tandem.llm.client import LLMConfig
from tandem.llm.probe import LLMProbeFailed, probe

from fakes import FakeLLMBehaviour, FakeOpenAIServer


def _refused_port() -> int:
    with socket.socket() as s:  # bound, never listening: connecting is refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_serves_the_model_passes_and_an_unnamed_model_is_the_only_one_listed():
    with FakeOpenAIServer(FakeLLMBehaviour(models=["qwen"])) as srv:
        assert probe(LLMConfig(url=srv.url, model="qwen")).model == "qwen"
        assert probe(LLMConfig(url=srv.url, model="default"), model_given=False).model == "qwen"
    with FakeOpenAIServer() as srv:  # no model list (404): the chat request decides
        assert probe(LLMConfig(url=srv.url, model="anything")).model == "anything"


@pytest.mark.parametrize("case, expect", [
    ("refused", "nothing answers at --llm-url"),
    ("unknown host", "is unknown"),
    ("no chat endpoint", "has no OpenAI chat endpoint"),
    ("unknown model", "does not serve model 'x' (it serves: qwen)"),
    ("not http", "is not an http(s) URL"),
])
def test_each_wrong_llm_is_named_with_what_to_do(case, expect):
    behaviour = FakeLLMBehaviour(models=None if case != "unknown model" else ["qwen"])
    with FakeOpenAIServer(behaviour) as srv:
        url = {"refused": f"http://127.0.0.1:{_refused_port()}/v1", "unknown host": "http://no-such-llm.invalid:8000/v1",
               "no chat endpoint": f"http://127.0.0.1:{srv.port}/api", "not http": "127.0.0.1:8000"}.get(case, srv.url)
        with pytest.raises(LLMProbeFailed) as e:
            probe(LLMConfig(url=url, model="x"))
    msg = str(e.value)
    assert expect in msg and "\n" not in msg
    if case in ("refused", "unknown host"):
        assert "--allow-llm-down" in msg


def _tandem(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tandem", *args], capture_output=True, text=True, timeout=timeout)


def test_run_with_nothing_at_the_llm_url_exits_2_with_one_line(tmp_path, spoken_question):
    """The issue's own example: it used to exit 0 after five warnings, with a reply that never used the LLM."""
    wav = tmp_path / "q.wav"
    sf.write(wav, spoken_question, 24000)
    r = _tandem("run", str(wav), "--llm-url", f"http://127.0.0.1:{_refused_port()}/v1", "--llm-model", "x")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tandem: error: nothing answers at --llm-url"), r.stderr


def test_serve_with_a_model_the_server_does_not_serve_exits_2_with_one_line():
    with FakeOpenAIServer(FakeLLMBehaviour(models=["qwen"])) as srv:
        r = _tandem("serve", "--port", "0", "--llm-url", srv.url, "--llm-model", "gpt-7")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not serve model 'gpt-7' (it serves: qwen)" in lines[0], r.stderr


@pytest.mark.slow
def test_allow_llm_down_starts_anyway_and_says_so_once(tmp_path, spoken_question):
    wav = tmp_path / "q.wav"
    sf.write(wav, np.concatenate([spoken_question, np.zeros(24000, np.float32)]), 24000)
    r = _tandem("run", str(wav), "--mode", "tandem", "--pace", "fast", "--allow-llm-down",
                "--llm-url", f"http://127.0.0.1:{_refused_port()}/v1", "--llm-model", "x", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.count("starting anyway (--allow-llm-down)") == 1
    assert r.stderr.count("stopped answering") == 1, "the outage is logged once, not once per request"
    assert "said:" in r.stdout
