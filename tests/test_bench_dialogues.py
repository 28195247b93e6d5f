"""`tandem bench --dialogues`: the rendering of a dialogue and the measures, on constructed audio
(known onsets and silences), and the bookkeeping with fakes; no real stack."""
import argparse
import json
from pathlib import Path

import numpy as np
import pytest

import tandem.audio.voices
from fakes import FakeStack
from tandem.bench import dialogues as bd
from tandem.audio.frames import FRAME_S
from tandem.runtime.errors import TandemError
from tandem.runner import RunResult
from tandem.bench.scoring import Word
from tandem.record.timeline import Timeline

SR = 24000


def tone(secs: float, level: float = 0.5) -> np.ndarray:
    return np.full(int(round(secs * SR)), level, np.float32)


def silence(secs: float) -> np.ndarray:
    return np.zeros(int(round(secs * SR)), np.float32)


def clip(lead: float, speech: float, tail: float) -> np.ndarray:
    """A test voice's clip: a quiet lead-in and tail around the speech."""
    return np.concatenate([tone(lead, 0.005), tone(speech), tone(tail, 0.005)])


def test_render_places_turns_by_their_speech_onset_and_end():
    turns = [bd.Turn("q1", ["a"]), bd.Turn("q2", ["b"]), bd.Turn("over", ["c"], talk_over_s=2.5)]
    clips = [clip(0.1, 2.0, 0.3), clip(0.25, 1.5, 0.1), clip(0.0, 1.0, 0.2)]
    track, spans = bd.render(clips, turns, lead_s=0.5, gap_s=7.0, tail_s=8.0)
    assert [(s.onset, s.end) for s in spans] == [
        pytest.approx((0.5, 2.5)), pytest.approx((9.5, 11.0)), pytest.approx((13.5, 14.5))]
    assert len(track) == pytest.approx((14.5 + 8.0) * SR, abs=1)
    loud = np.flatnonzero(np.abs(track) > bd.SPEECH) / SR
    assert loud[0] == pytest.approx(0.5, abs=1e-4) and loud[-1] == pytest.approx(14.5, abs=1e-3)
    # the track is silent between turns (but for the clips' quiet lead-ins and tails)
    assert np.max(np.abs(track[int(2.6 * SR): int(9.4 * SR)])) < bd.SPEECH
    assert np.max(np.abs(track[int(11.1 * SR): int(13.4 * SR)])) < bd.SPEECH


def test_render_refuses_a_silent_turn():
    with pytest.raises(TandemError, match="silence"):
        bd.render([silence(1.0)], [bd.Turn("x", [])])


def reply(*parts: tuple[float, float], total: float = 20.0) -> np.ndarray:
    """Assistant audio: loud over each (start, end), silent elsewhere."""
    x = silence(total)
    for a, b in parts:
        x[int(a * SR): int(b * SR)] = 0.3
    return x


def test_yield_time_is_the_start_of_the_first_long_silence_after_the_onset():
    # talking 1-6 s with a 0.3 s pause (a sentence boundary) at 4.0; the user cuts in at 4.2
    out = reply((1.0, 4.0), (4.3, 5.0), (8.0, 10.0))
    assert bd.yield_time(out, 4.2) == pytest.approx(0.8, abs=0.021), "the short pause is not a yield"
    assert bd.yield_time(out, 3.0) == pytest.approx(2.0, abs=0.021)
    assert bd.yield_time(out, 6.0) == 0.0, "already silent"
    assert bd.yield_time(reply((0.0, 20.0)), 3.0) is None, "never fell silent"
    # silent at the onset, but it starts talking 0.3 s later and goes on: the yield comes when it stops
    assert bd.yield_time(reply((3.3, 7.0)), 3.0) == pytest.approx(4.0, abs=0.021)


def test_talk_through_a_backchannel():
    bc = bd.Span(5.0, 5.6)
    through = bd.talk_through(reply((1.0, 5.2), (5.5, 12.0)), bc)  # a 0.3 s pause: talked through
    assert through == {"talking_at_onset": True, "gap_start_s": None, "talked_through": True}
    stopped = bd.talk_through(reply((1.0, 5.4), (7.0, 12.0)), bc)  # 1.6 s of silence from 5.4 s
    assert stopped["talked_through"] is False and stopped["gap_start_s"] == pytest.approx(0.4, abs=0.021)
    late = bd.talk_through(reply((1.0, 6.0), (7.0, 12.0)), bc)  # stops 0.4 s after the backchannel ended
    assert late["talked_through"] is False and late["gap_start_s"] == pytest.approx(1.0, abs=0.021)
    later = bd.talk_through(reply((1.0, 6.2), (7.0, 12.0)), bc)  # stops later than 0.5 s after its end
    assert later["talked_through"] is True
    quiet = bd.talk_through(reply((8.0, 12.0)), bc)  # nothing to talk through
    assert quiet["talking_at_onset"] is False and quiet["talked_through"] is False


def timeline(n_frames: int, events=()):
    tl = Timeline(lambda: 0.0, meta={"mode": "cascade"})
    for k in range(n_frames):
        tl.add_frame((k + 1) * FRAME_S, 0.5, 1.0, -1, "")
    for kind, data in events:
        tl.add(kind, **data)
    return tl.to_dict()


def test_score_dialogue_reads_the_last_turn():
    d = bd.Dialogue("d1", "interrupt", [bd.Turn("explain at length", []),
                                        bd.Turn("stop, what is the capital of Egypt", ["cairo"], 2.5)])
    spans = [bd.Span(0.5, 3.0), bd.Span(5.5, 8.0)]
    out = reply((4.0, 5.8), (9.0, 11.0), total=16.0)  # falls silent 0.3 s after the user cut in
    words = [[Word("Airplanes", 4.0, 4.5)], [Word("Cairo.", 9.2, 9.6)]]
    rec = bd.score_dialogue(d, spans, out, words, timeline(200, [("final", {"text": "x", "audio_s": 1})]))
    assert rec["correct"] and rec["answer_s"] == pytest.approx(1.2)
    assert rec["onset_s"] == pytest.approx(1.0, abs=1e-3) and rec["talking_at_end"] is False
    assert rec["talking_at_onset"] and rec["yield_s"] == pytest.approx(0.3, abs=0.021)
    assert rec["yielded"] and rec["yielded_and_answered"]
    assert rec["turns"][0]["correct"] is None and rec["turns"][1]["correct"] is True
    assert rec["deadline_misses"] == 0 and rec["finals"] == ["x"]
    # an answer said before the turn ended does not count
    early = bd.score_dialogue(d, spans, out, [[], [Word("Cairo", 7.0, 7.4)]], timeline(200))
    assert not early["correct"] and early["answer_s"] is None


def test_a_backchannel_keeps_the_reply_unless_a_barge_in_after_its_onset_dropped_it():
    d = bd.Dialogue("b1", "backchannel", [bd.Turn("tell me about the moon", []), bd.Turn("Mm-hmm.", [], 2.5)])
    spans = [bd.Span(0.5, 2.0), bd.Span(4.5, 5.5)]
    out = reply((3.0, 4.7), (5.6, 9.0), total=12.0)  # a 0.9 s pause: not talked through, but it went on
    words = [[], []]
    kept = bd.score_dialogue(d, spans, out, words, timeline(150, [("barge_in", {"t": 1.0, "reason": "long"})]))
    assert kept["reply_kept"] and not kept["talked_through"], "a barge-in before the backchannel is not its"
    dropped = bd.score_dialogue(d, spans, out, words, timeline(150, [("barge_in", {"t": 4.9, "reason": "long"})]))
    assert not dropped["reply_kept"]


def test_load_dialogues(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"id": "a", "kind": "followup", "turns": [{"say": "x", "answers": ["y"]}]}) + "\n\n")
    assert bd.load_dialogues(p) == [bd.Dialogue("a", "followup", [bd.Turn("x", ["y"], None)])]
    p.write_text(json.dumps({"id": "a", "turns": [{"say": "x", "talk_over_s": 1}]}) + "\n")
    with pytest.raises(TandemError, match="first turn"):
        bd.load_dialogues(p)
    p.write_text('{"id": "a"}\n')
    with pytest.raises(TandemError, match="not a dialogue"):
        bd.load_dialogues(p)


def test_the_dev_dialogues_load():
    path = Path(__file__).resolve().parents[2] / "shared" / "data" / "dialogues-dev.jsonl"
    if not path.exists():
        pytest.skip("no shared dev dialogues here")
    ds = bd.load_dialogues(path)
    assert {d.kind for d in ds} == {"followup", "interrupt", "backchannel"}
    assert all(d.turns[-1].talk_over_s for d in ds if d.kind != "followup")


class FakeTranscriber:
    """Hears "It is Cairo." at the start of the window's last stretch of sound."""

    def __init__(self) -> None:
        self.contexts: list[str | None] = []

    def words(self, audio, context=None):
        self.contexts.append(context)
        loud = np.abs(audio) > 0.1
        if not loud.any():
            return []
        rises = np.flatnonzero(loud[1:] & ~loud[:-1]) + 1
        t = (rises[-1] if len(rises) else 0) / SR
        return [Word("It", t, t + 0.2), Word("is", t + 0.2, t + 0.4), Word("Cairo.", t + 0.4, t + 0.9)]


def fake_run_session(stack, audio, config, front_end_name="compact", oracle_policy="kame", meta=None, **kw):
    """Tandem yields 0.3 s after the user cuts in; the cascade talks on over everything."""
    x = audio.samples
    n = len(x) // 1920
    tl = Timeline(lambda: 0.0, meta={"mode": config.mode})
    for k in range(n):
        tl.add_frame((k + 1) * FRAME_S, 0.5, 1.0, 0, "")
    out = np.zeros_like(x)
    loud = np.abs(x) > 0.02
    starts = np.flatnonzero(loud[1:] & ~loud[:-1]) + 1  # the turns' onsets (after the first)
    ends = np.flatnonzero(loud[:-1] & ~loud[1:]) + 1
    for e in ends:  # a 3 s reply after every turn
        out[e + SR: e + 4 * SR] = 0.5
    if config.mode == "tandem":
        for s in starts:  # silent from 0.3 s after each onset until its reply
            out[s + int(0.3 * SR): ends[ends > s][0] + SR] = 0.0
    else:
        out[ends[0] + SR: ends[-1] + 4 * SR] = 0.5
    return RunResult(out, tl, audio)


def test_dialogue_bench_bookkeeping(tmp_path, monkeypatch):
    monkeypatch.setattr(bd, "Stack", FakeStack)
    monkeypatch.setattr(bd, "Transcriber", FakeTranscriber)
    monkeypatch.setattr(bd, "run_session", fake_run_session)
    monkeypatch.setattr(bd, "write_outputs", lambda res, wav, tl, png: [Path(p).write_bytes(b"x") for p in (wav, tl, png)])
    monkeypatch.setattr(tandem.audio.voices, "speak", lambda text, voice, lead_s=0.0, tail_s=0.0: clip(0.1, 1.0 + 0.02 * len(text), 0.1))
    rows = [{"id": "i1", "kind": "interrupt", "turns": [{"say": "talk a lot", "answers": []},
                                                        {"say": "stop. capital of Egypt?", "answers": ["cairo"], "talk_over_s": 2.5}]},
            {"id": "b1", "kind": "backchannel", "turns": [{"say": "tell me", "answers": []},
                                                          {"say": "Yeah.", "answers": [], "talk_over_s": 2.5}]},
            {"id": "f1", "kind": "followup", "turns": [{"say": "q", "answers": ["x"]}, {"say": "and Egypt?", "answers": ["cairo"]}]}]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = argparse.Namespace(dialogues=path, limit=None, modes="tandem,cascade", policy="prefix", out=tmp_path / "out",
                              voice="espeak", front_end="compact", llm_url=None, llm_model=None, checkpoint=None)
    assert bd.run_dialogue_bench(args) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    by = {(r["dialogue_id"], r["mode"]): r for r in res["runs"]}
    assert len(by) == 6 and not any(r.get("failed") for r in res["runs"])
    assert by["i1", "tandem"]["yield_s"] == pytest.approx(0.3, abs=0.03) and by["i1", "tandem"]["yielded_and_answered"]
    assert by["i1", "cascade"]["yielded"] is False
    assert by["b1", "cascade"]["talked_through"] and not by["b1", "tandem"]["talked_through"]
    assert by["f1", "tandem"]["correct"] and by["f1", "tandem"]["turns"][0]["correct"] is False
    s = res["summary"]
    assert s["tandem / interrupt"]["yielded_within_0.5s"] == "1/1" and s["cascade / interrupt"]["yielded_within_0.5s"] == "0/1"
    assert s["cascade / backchannel"]["talked_through"] == "1/1"
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "| tandem / followup |" in md and "| i1 | interrupt | cascade |" in md
    assert (tmp_path / "out" / "dialogues.png").stat().st_size > 10_000


def test_a_replys_fluency_is_heard_from_the_end_of_the_turn_it_answers():
    from tandem.bench.dialogues import Span, reply_windows

    spans = [Span(0.5, 2.0), Span(4.0, 5.5)]
    assert reply_windows(spans, 24000 * 8) == [(0, int(5.5 * 24000)), (int(5.5 * 24000), 24000 * 8)]
