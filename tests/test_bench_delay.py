"""`tandem bench --llm-delay`: option parsing, and the bookkeeping with fakes (a fake LLM behind the
real delay proxy, fake sessions whose cascade starts speaking when the LLM's first token came)."""
import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest

from fakes import FakeOpenAIServer, FakeTranscriber
from tandem.audio import voices
from tandem.bench import delay as bench_delay
from tandem.audio.frames import FRAME_S
from tandem.cli import build_parser
from tandem.runtime.errors import TandemError
from tandem.llm.client import ChatClient, LLMConfig
from tandem.runner import RunResult
from tandem.record.timeline import Timeline

QUESTIONS = [{"id": "q1", "question": "What is the capital of France?", "answers": ["paris"]},
             {"id": "q2", "question": "What is the capital of Japan?", "answers": ["tokyo"]}]


def test_llm_delay_values_parse():
    assert bench_delay.parse_delays("0,0.5,1,2") == [0.0, 0.5, 1.0, 2.0]
    assert bench_delay.parse_delays(" 1 ") == [1.0]
    assert bench_delay.parse_rate("25") == 25.0


@pytest.mark.parametrize("value, message", [("", "comma-separated list of seconds"), ("0,x", "comma-separated list"),
                                            ("0,,1", "comma-separated list"), ("-1", ">= 0, not -1"),
                                            ("nan", ">= 0, not nan"), ("0.5,0.5", "given twice"),
                                            ("30", "first-token timeout")])
def test_bad_llm_delays_give_a_clear_error(value, message, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["bench", "--questions", "q.jsonl", "--out", "o", "--llm-delay", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --llm-delay" in err and message in err


@pytest.mark.parametrize("value", ["0", "-3", "fast", "inf"])
def test_bad_llm_rates_give_a_clear_error(value, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--questions", "q.jsonl", "--out", "o", "--llm-delay", "0", "--llm-rate", value])
    assert "argument --llm-rate: a rate is tokens per second > 0" in capsys.readouterr().err


def test_an_llm_rate_without_delays_is_refused(capsys):
    from tandem.cli import main

    assert main(["bench", "--questions", "q.jsonl", "--out", "o", "--llm-rate", "20"]) == 2
    assert "give --llm-delay too" in capsys.readouterr().err


class FakeStack:
    def __init__(self, config):
        self.server = None

    def __enter__(self):
        self.fake = FakeOpenAIServer().__enter__()
        self.llm_config = LLMConfig(url=self.fake.url, model="m")
        return self

    def __exit__(self, *exc):
        self.fake.__exit__(*exc)

    def client(self):
        return ChatClient(self.llm_config)

    def pids(self):
        return []


def fake_speak(text, voice="festival", lead_s=0.5, tail_s=3.0):
    return np.concatenate([np.zeros(int(lead_s * 24000)), 0.5 * np.ones(24000), np.zeros(int(tail_s * 24000))]).astype(np.float32)


def fake_run_session(stack, audio, config, oracle_policy="prefix", meta=None, **kw):
    """tandem speaks 0.3 s after the speech ends; the cascade 0.1 s after the LLM's first token."""
    tl = Timeline(lambda: 0.0, meta={"mode": config.mode, **(meta or {})})
    for k in range(len(audio.samples) // 1920):
        tl.add_frame((k + 1) * FRAME_S, 0.5, 1.0, 0, "")

    async def ttft() -> float:
        client = stack.client()
        t0 = time.perf_counter()
        try:
            async for _ in client.stream([{"role": "user", "content": "hi"}]):
                return time.perf_counter() - t0
        finally:
            await client.aclose()

    first = asyncio.run(ttft())
    tl.add("llm_start", t=1.0, stream=1)
    tl.add("llm_first_token", t=1.0 + first, stream=1, ttft_s=round(first, 4))
    end = int(np.flatnonzero(np.abs(audio.samples) > 0.02)[-1])
    start = end + int((0.3 if config.mode == "tandem" else first + 0.1) * 24000)
    out = np.zeros_like(audio.samples)
    out[start: start + 24000] = 0.5
    return RunResult(out, tl, audio)


def test_every_mode_runs_at_every_delay_on_the_same_audio(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_delay, "Stack", FakeStack)
    monkeypatch.setattr(bench_delay, "Transcriber", FakeTranscriber)
    monkeypatch.setattr(bench_delay, "run_session", fake_run_session)
    monkeypatch.setattr(bench_delay, "write_outputs", lambda res, wav, tl, png: [Path(p).write_bytes(b"x") for p in (wav, tl, png)])
    monkeypatch.setattr(voices, "speak", fake_speak)
    monkeypatch.setattr(bench_delay, "MemorySampler", _NoSampler)
    qpath = tmp_path / "q.jsonl"
    qpath.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    args = argparse.Namespace(questions=qpath, limit=None, stride=1, modes="tandem,cascade", policy="prefix",
                              out=tmp_path / "out", voice="espeak", tail=1.0, front_end="fake-unused",
                              llm_url=None, llm_model=None, llm_load=False, llm_delay=[0.0, 0.5], llm_rate=None)
    monkeypatch.setattr("tandem.speak.frontend.build", lambda name, **kw: None)
    assert bench_delay.run_delay_bench(args) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    runs = res["runs"]
    assert [(r["question_id"], r["llm_delay_s"], r["mode"]) for r in runs] == [
        (q, d, m) for q in ("q1", "q2") for d in (0.0, 0.5) for m in ("tandem", "cascade")]
    assert len({r["input_wav"] for r in runs}) == 2  # one audio file per question, for every cell
    rows = {(r["mode"], r["llm_delay_s"]): r for r in res["delay_table"]}
    assert rows[("tandem", 0.0)]["onset_s"] == pytest.approx(0.3, abs=0.02)
    assert rows[("tandem", 0.5)]["onset_s"] == pytest.approx(0.3, abs=0.02)
    assert rows[("cascade", 0.0)]["onset_s"] < 0.3
    assert 0.6 <= rows[("cascade", 0.5)]["onset_s"] < 0.85  # the proxy's delay reached the session's client
    assert rows[("cascade", 0.5)]["llm_ttft_s"] >= 0.5
    assert rows[("cascade", 0.5)]["correct"] == 1  # it always says Paris
    assert rows[("cascade", 0.5)]["all_correct"] == 1 and rows[("cascade", 0.5)]["answer_s_all_correct"] is not None
    assert res["meta"]["tail_s"] == 1.5 and res["meta"]["proxy_streams"] == 8
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "| cascade | 0.5 s |" in md and "cascade @0.5s" in md
    assert (tmp_path / "out" / "delay.png").stat().st_size > 10_000


def test_several_policies_are_refused_before_any_audio(tmp_path):
    args = argparse.Namespace(questions=tmp_path / "q.jsonl", limit=None, modes="tandem,cascade", policy="kame,prefix",
                              out=tmp_path / "out", llm_delay=[0.0], llm_rate=None, llm_load=False)
    with pytest.raises(TandemError, match="give one --policy"):
        bench_delay.run_delay_bench(args)
    assert not (tmp_path / "out").exists()


class _NoSampler:
    peak_mb = 0.0

    def __init__(self, pids):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_dialogues_with_llm_delays_are_refused(capsys):
    from tandem.cli import main

    assert main(["bench", "--dialogues", "d.jsonl", "--out", "o", "--llm-delay", "0,1"]) == 2
    assert "--llm-delay runs spoken questions" in capsys.readouterr().err
