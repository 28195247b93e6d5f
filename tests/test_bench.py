"""`tandem bench`: bookkeeping with fakes (fast), and a real two-question run (slow)."""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fakes import FakeStack, FakeTranscriber
from tandem.bench import questions as bench
from tandem.runtime.errors import TandemError
from tandem.audio.frames import FRAME_S
from tandem.runner import RunResult
from tandem.record.timeline import Timeline

QUESTIONS = [{"id": "q1", "question": "What is the capital of France?", "answers": ["paris"]},
             {"id": "q2", "question": "What is the capital of Japan?", "answers": ["tokyo"]}]


def write_questions(path: Path, rows=QUESTIONS) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def fake_run_session(stack, audio, config, front_end_name="compact", oracle_policy="kame", meta=None, **kw):
    if config.mode == "cascade" and meta["question_id"] == "q2":
        raise RuntimeError("the cascade broke")
    tl = Timeline(lambda: 0.0, meta={"mode": config.mode, **(meta or {})})
    n = len(audio.samples) // 1920
    for k in range(n):
        tl.add_frame((k + 1) * FRAME_S, 0.5, 1.0, 0, "")
    out = np.zeros_like(audio.samples)
    end = int(np.flatnonzero(np.abs(audio.samples) > 0.02)[-1])
    delay = {"kame": 0.5, "prefix": 0.3}.get(oracle_policy, 1.0) if config.mode == "tandem" else 1.0
    start = end + int(delay * 24000)
    out[start: start + 24000] = 0.5
    return RunResult(out, tl, audio)


def test_bench_records_every_variant_and_goes_on_after_a_failed_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "Stack", FakeStack)
    heard = FakeTranscriber()
    monkeypatch.setattr(bench, "Transcriber", lambda: heard)
    monkeypatch.setattr(bench, "run_session", fake_run_session)
    monkeypatch.setattr(bench, "write_outputs", lambda res, wav, tl, png: [Path(p).write_bytes(b"x") for p in (wav, tl, png)])
    args = argparse.Namespace(questions=write_questions(tmp_path / "q.jsonl"), limit=None, modes="tandem,cascade",
                              policy="kame,prefix", out=tmp_path / "out", voice="espeak", tail=1.0, front_end="compact",
                              llm_url=None, llm_model=None, llm_load=False)
    assert bench.run_bench(args) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    runs = res["runs"]
    assert [(r["question_id"], r["variant"]) for r in runs] == [
        (q, v) for q in ("q1", "q2") for v in ("tandem[kame]", "tandem[prefix]", "cascade")]
    failed = [r for r in runs if r.get("failed")]
    assert len(failed) == 1 and failed[0]["variant"] == "cascade" and "the cascade broke" in failed[0]["error"]
    ok = [r for r in runs if not r.get("failed")]
    assert all(Path(r["output_wav"]).is_absolute() and Path(r["input_wav"]).exists() for r in ok)
    s = res["summary"]
    assert s["tandem[prefix]"]["onset_s_median"] == pytest.approx(0.3, abs=0.01)
    assert s["tandem[kame]"]["onset_s_median"] == pytest.approx(0.5, abs=0.01)
    assert s["cascade"]["failed"] == 1 and s["cascade"]["correct_rate"] == 0.5
    assert s["tandem[kame]"]["correct_rate"] == 0.5  # it always says Paris
    assert (tmp_path / "out" / "latency.png").stat().st_size > 10_000
    assert "tandem[prefix]" in (tmp_path / "out" / "summary.md").read_text()
    questions = [json.loads(line)["question"] for line in args.questions.read_text().splitlines()]
    assert set(questions) <= set(heard.contexts), "each reply is heard with its question as the listener's context"


def test_unknown_policy_fails_before_any_audio(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "Stack", FakeStack)
    monkeypatch.setattr(bench, "Transcriber", FakeTranscriber)
    args = argparse.Namespace(questions=write_questions(tmp_path / "q.jsonl"), limit=None, modes="tandem",
                              policy="kame,nope", out=tmp_path / "out", voice="espeak", tail=1.0, front_end="compact",
                              llm_url=None, llm_model=None, llm_load=False)
    with pytest.raises(ValueError, match="unknown oracle policy"):
        bench.run_bench(args)
    assert not (tmp_path / "out" / "audio").exists()


def test_a_missing_checkpoint_fails_before_any_audio(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "Stack", FakeStack)
    monkeypatch.setattr(bench, "Transcriber", FakeTranscriber)
    args = argparse.Namespace(questions=write_questions(tmp_path / "q.jsonl"), limit=None, modes="tandem",
                              policy="prefix", out=tmp_path / "out", voice="espeak", tail=1.0, front_end="compact",
                              llm_url=None, llm_model=None, llm_load=False, checkpoint=tmp_path / "nope.pt")
    with pytest.raises(TandemError, match="no checkpoint"):
        bench.run_bench(args)
    assert not (tmp_path / "out" / "audio").exists()


def test_loadtest_reads_question_files_with_the_bench_loader(tmp_path):
    from tandem.server.loadtest import DEFAULT_QA, questions_and_answers

    def question_texts(path, limit):
        return [q for q, _ in questions_and_answers(path, limit)]

    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    assert question_texts(path, None) == [q["question"] for q in QUESTIONS]
    assert question_texts(path, 1) == [QUESTIONS[0]["question"]]
    assert question_texts(None, 2) == [q for q, _ in DEFAULT_QA[:2]]
    assert len({q for q, _ in DEFAULT_QA}) >= 10, "ten sessions ask ten different questions at once"
    with pytest.raises(TandemError, match="not found"):
        question_texts(tmp_path / "missing.jsonl", None)


@pytest.mark.slow
def test_real_two_question_benchmark(tmp_path):
    q = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "bench"
    r = subprocess.run([sys.executable, "-m", "tandem", "bench", "--questions", str(q), "--modes", "tandem,cascade",
                        "--policy", "kame,prefix", "--voice", "flite", "--tail", "3", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert len(res["runs"]) == 6 and not any(x.get("failed") for x in res["runs"])
    for run in res["runs"]:
        assert Path(run["output_wav"]).exists() and Path(run["plot"]).exists()
        assert run["speech_end_s"] > 1.0 and run["onset_s"] is not None, run
        # timing is the benchmark's to report, not a test's to assert: only catch a frame loop gone wrong
        assert run["deadline_misses"] < 0.1 * run["frames"], run
    cascade = [x for x in res["runs"] if x["mode"] == "cascade"]
    assert sum(x["correct"] for x in cascade) >= 1, [x["said"] for x in cascade]
    tandem = res["summary"]["tandem[prefix]"]
    assert tandem["onset_s_median"] < res["summary"]["cascade"]["onset_s_median"]
    assert (out / "latency.png").exists() and (out / "summary.md").exists()


def test_a_mode_variant_is_its_mode_with_other_scheduler_settings():
    import argparse

    from tandem.bench.common import modes_and_policies, session_config
    from tandem.runtime.errors import TandemError

    c = session_config("tandem-no-opening")
    assert c.mode == "tandem" and c.scheduler.restate is False
    assert session_config("tandem").scheduler.restate is True
    args = argparse.Namespace(modes="tandem,tandem-no-opening,cascade", policy="prefix")
    assert modes_and_policies(args)[0] == ["tandem", "tandem-no-opening", "cascade"]
    with pytest.raises(TandemError, match="variants: tandem-no-opening"):
        modes_and_policies(argparse.Namespace(modes="tandem-nope", policy="prefix"))


def test_a_mode_variant_may_set_the_front_end_and_the_session_too():
    from tandem.bench.common import front_end_options, session_config
    from tandem.frontends.compact.frontend import CompactFrontEnd

    assert front_end_options("tandem-no-voice-ahead") == {"voice_ahead": False}
    assert session_config("tandem-no-voice-ahead").mode == "tandem"
    assert front_end_options("tandem-listener-vad") == {} and session_config("tandem-listener-vad").frame_vad is False
    assert front_end_options("tandem") == {}
    assert CompactFrontEnd(**front_end_options("tandem-no-voice-ahead")).state.ends_clause is None
    assert CompactFrontEnd().state.ends_clause is not None


def test_answer_latency_is_compared_on_the_questions_both_modes_answered():
    from tandem.bench.questions import paired_answers

    def run(q, mode, ok, ans):
        return {"question_id": q, "mode": mode, "variant": mode, "correct": ok, "answer_s": ans if ok else None}

    runs = [run("a", "tandem", True, 1.0), run("a", "cascade", True, 2.0),
            run("b", "tandem", True, 0.5), run("b", "cascade", False, None),
            run("c", "tandem", True, 3.0), run("c", "cascade", True, 2.0),
            run("a", "tandem-no-knowledge", False, None), run("a", "cascade-no-knowledge", True, 9.0)]
    pairs = paired_answers(runs)
    main = next(p for p in pairs if (p["tandem"], p["cascade"]) == ("tandem", "cascade"))
    assert main["questions"] == 2 and main["tandem_answer_s"] == 2.0 and main["cascade_answer_s"] == 2.0
    assert main["ratio"] == 1.0, "b, answered by the tandem alone, is left out"
    assert not any(p["tandem"] == "tandem-no-knowledge" for p in pairs), "no question both answered"


def test_the_loadtest_counts_the_turns_whose_reply_took_back_what_it_began():
    from types import SimpleNamespace

    from tandem.server.loadtest import SessionReport, _said_after, summarize

    # what a client received: a reply begun as the user paused belongs to the turn, the next turn's text not
    got = SimpleNamespace(texts=["It is", " New", " sorry, It is Paris.", " It has 8 legs."], texts_t=[9.7, 10.2, 11.0, 16.0])
    assert _said_after(SimpleNamespace(got=got), 10.0, 5.0) == "It is New sorry, It is Paris."
    a = SessionReport(0, turn_texts=["It is New sorry, It is Paris.", "It has 8 legs."])
    b = SessionReport(1, turn_texts=["It was written by William Shakespeare.", "Sorry, it is Jupiter.", ""])
    s = summarize([a, b], None)
    assert s["repaired_pct"] == 40.0, "2 of the 5 turns: the word, in any case, once a turn"
    assert summarize([SessionReport(0)], None)["repaired_pct"] is None


def test_the_capacity_is_the_most_sessions_at_which_every_measure_holds(tmp_path):
    from tandem.server.loadtest import capacity_of, capacity_table, parse_session_counts, verdict
    from tandem.server.loadtest_report import plot_sweep

    def run(n, median, slowest, answered, misses=0):
        s = {"sessions": n, "onset_client_median_s": median, "onset_client_p95_s": slowest, "onset_client_max_s": slowest,
             "answered_pct": answered, "repaired_pct": 12.5,
             "deadline_misses": misses, "underruns": 0, "errors": 0, "cpu": {"ours_cores": 1.0, "others_cores": 0.0}}
        s["verdict"] = verdict(s)
        return s

    rows = [run(1, 0.4, 0.6, 100.0), run(2, 0.45, 0.7, 100.0), run(4, 0.5, 0.9, 100.0), run(6, 0.4, 0.6, 100.0)]
    assert [r["verdict"]["pass"] for r in rows] == [True, True, False, True]
    assert capacity_of(rows) == 2, "a pass above a failure does not count: capacity is where quality first drops"
    assert not run(1, 0.4, 0.6, 100.0, misses=1)["verdict"]["pass"]
    assert not run(1, 0.4, 0.6, 95.0)["verdict"]["pass"], "every session hears its answer in time"
    assert "fail: client onset max <= 0.8 s" in capacity_table(rows)
    assert "| 12.5% |" in capacity_table(rows), "the turns repaired are shown, though no check of the verdict"
    plot_sweep(rows, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 10_000
    assert parse_session_counts("4,1,2,2") == [1, 2, 4]
    with pytest.raises(TandemError, match="between 1 and 64"):
        parse_session_counts("0")
