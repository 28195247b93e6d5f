"""Replaying recorded timelines through a compact checkpoint, offline."""
import re
import json
import subprocess
import sys

import numpy as np
import pytest

from tandem.record import timeline as tl
from tandem.audio.frames import FRAME_S, write_mono
from tandem.speak.frontend import UserFrame
from tandem.frontends.compact.frontend import CompactFrontEnd
from tandem.frontends.compact.replay import inputs_from_timeline, replay, said_answer, summarize
from tandem.frontends.compact.tokenizer import PAD, START
from tandem.think.oracle import OracleStream, make_policy
from tandem.audio.voices import speak


def record_session(fe: CompactFrontEnd, partials: list[tuple[float, str]], vad: list[float],
                   oracle_at: tuple[int, str], speech_end_s: float) -> dict:
    """Steps a front-end the way a live session does (the latest transcript, this frame's VAD and
    oracle token) and writes down what a session's timeline holds."""
    timeline = tl.Timeline(lambda: 0.0)
    stream = OracleStream(START, PAD, make_policy("prefix"))
    for t, text in partials:
        timeline.add(tl.PARTIAL, t=t, text=text)
    timeline.add(tl.VAD_END, t=speech_end_s + 0.4, audio_s=speech_end_s)
    settle_frame = round((speech_end_s + 0.4) / FRAME_S)  # the final came with the voice's end, and kept the stream
    fe.reset()
    text = ""
    timeline.meta["oracle_policy"] = "prefix"
    for k, v in enumerate(vad):
        t = k * FRAME_S
        timeline.current_frame = k
        text = max(((pt, s) for pt, s in partials if pt <= t), default=(0.0, text))[1]
        if k == oracle_at[0]:
            stream.reset(k)
            timeline.add(tl.ORACLE_RESET)
            for word in re.findall(r"\s*\S+", oracle_at[1]):  # handed over word by word, as a session does
                ids = fe.tokenizer.encode(word)
                stream.append(ids, k)
                timeline.add(tl.ORACLE_APPEND, text=word, tokens=ids)
        if k == settle_frame:
            timeline.add(tl.ORACLE_SETTLED, settled=True)
        otok = stream.token(k)
        out = fe.step(UserFrame(np.zeros(1920, np.float32), v, v > 0.5, text, oracle_settled=k >= settle_frame,
                                oracle_upcoming=stream.upcoming(k) if k >= settle_frame else None), otok)
        timeline.add_frame(t, 0.0, 1.0, otok, " ".join(out.text), v)
    return timeline.to_dict()


@pytest.fixture(scope="module")
def fe():
    return CompactFrontEnd()


def test_replay_reproduces_what_the_session_said(fe):
    partials = [(0.5, "What is"), (0.9, "What is the capital"), (1.3, "What is the capital of France"),
                (1.9, "What is the capital of France?")]
    vad = [1.0] * 20 + [0.02] * 50
    rec = record_session(fe, partials, vad, (14, "The capital of France is Paris."), speech_end_s=20 * FRAME_S)
    rec = json.loads(json.dumps(rec))  # as read back from disk
    r = replay(rec, fe, "q")
    assert r.inputs.vad_source == "timeline"
    assert r.said.split() == r.recorded_said.split()
    assert "Paris" in r.said
    assert r.turn_frames_after_end is not None and 0 <= r.turn_frames_after_end <= 8
    summary = summarize([r], {"q": ["Paris"]})
    assert summary.pop("answer_frames_after_end_median") == r.pieces[-1][0] - r.inputs.speech_end_frame > 0
    assert summary == {
        "timelines": 1, "turns_taken": 1, "turns_missed": 0, "turn_frames_after_vad_end_median":
        float(r.turn_frames_after_end), "answers_said": 1, "answers_scored": 1, "copy_exact": 1, "copy_judged": 1}


def test_copy_exactness_of_a_replay_judges_the_last_oracle_against_what_was_said(fe):
    from tandem.bench.copying import last_oracle_text

    partials = [(0.5, "What is"), (1.3, "What is the capital of France"), (1.9, "What is the capital of France?")]
    rec = record_session(fe, partials, [1.0] * 20 + [0.02] * 50, (14, "The capital of France is Paris."),
                         speech_end_s=20 * FRAME_S)
    r = replay(json.loads(json.dumps(rec)), fe, "q")
    assert last_oracle_text(r.timeline).split() == "The capital of France is Paris.".split()
    r.said = "The capital of France is Par is."  # what a garbled copy would have said
    assert summarize([r], {})["copy_exact"] == 0 and summarize([r], {})["copy_judged"] == 1


def test_transcript_per_frame_follows_the_listener_events_and_an_empty_final_keeps_the_partial(fe):
    frames = {"t": [k * FRAME_S for k in range(6)], "oracle_token": [PAD] * 6, "vad": [1.0] * 6, "text": [""] * 6}
    events = [{"t": 0.1, "kind": "partial", "text": "hello"}, {"t": 0.2, "kind": "partial", "text": "hello there"},
              {"t": 0.3, "kind": "final", "text": ""}]
    inp = inputs_from_timeline({"frames": frames, "events": events}, fe.tokenizer)
    assert inp.transcripts == ["", "", "hello", "hello there", "hello there", "hello there"]
    assert inp.speech_end_frame is None


def test_old_timelines_get_their_voice_activity_from_the_input_audio(tmp_path, fe):
    q = speak("What is the capital of France?", "flite", lead_s=0.5, tail_s=1.0)
    wav = tmp_path / "q.wav"
    write_mono(wav, q)
    n = int(len(q) / 24000 / FRAME_S)
    frames = {"t": [k * FRAME_S for k in range(n)], "oracle_token": [PAD] * n, "text": [""] * n}
    inp = inputs_from_timeline({"frames": frames, "events": [], "meta": {"input": str(wav)}}, fe.tokenizer)
    assert inp.vad_source == "audio"
    vad = np.array(inp.vad)
    assert vad[:5].max() < 0.3, "silent lead-in"
    assert vad[10:20].mean() > 0.8, "speech"
    assert vad[-5:].max() < 0.3, "silent tail"
    with pytest.raises(ValueError, match="voice activity"):
        inputs_from_timeline({"frames": frames, "events": []}, fe.tokenizer)
    recorded = {**frames, "vad": [0.5] * n}
    tl = {"frames": recorded, "events": [], "meta": {"input": str(wav)}}
    assert inputs_from_timeline(tl, fe.tokenizer).vad == [0.5] * n, "a recorded voice activity is taken as it is"
    now, late = (inputs_from_timeline(tl, fe.tokenizer, vad_lag=lag) for lag in (0, 2))
    assert now.vad_source == late.vad_source == "audio", "vad_lag measures it again from the input audio"
    assert late.vad[2:] == now.vad[:-2] and late.vad[:2] == [0.0, 0.0], "two frames late"


def test_said_answer_matches_whole_words():
    assert said_answer("The capital is New Delhi.", ["New Delhi"])
    assert not said_answer("The capital is Newy.", ["New Delhi"])
    assert not said_answer("Parisian food", ["Paris"])


def test_cli_rejects_a_file_that_is_not_a_timeline(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run([sys.executable, "-m", "tandem", "replay", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "not a readable timeline" in r.stderr


def test_replay_knows_when_the_oracle_answered_the_final_from_old_timelines_too():
    """`settled_frames`: the ORACLE_SETTLED events; for a timeline recorded before them, worked out as the
    scheduler decides (a stream on the final settles the oracle once adopted; one on a partial unsettles
    it; the final keeping the adopted stream settles it), from the session's next frame."""
    from tandem.frontends.compact.replay import settled_frames

    old = {"events": [
        {"frame": 2, "kind": "llm_start", "stream": 1}, {"frame": 3, "kind": "llm_adopt", "stream": 1},
        {"frame": 5, "kind": "final", "text": "what is the capital of france"},
        {"frame": 5, "kind": "llm_keep", "stream": 1, "reason": "final as heard when it started"},
        {"frame": 8, "kind": "llm_start", "stream": 2}, {"frame": 9, "kind": "llm_adopt", "stream": 2},
        {"frame": 11, "kind": "final", "text": "and of spain"},
        {"frame": 11, "kind": "llm_start", "stream": 3}, {"frame": 13, "kind": "llm_adopt", "stream": 3}]}
    assert settled_frames(old, 16) == [False] * 6 + [True] * 4 + [False] * 4 + [True] * 2
    new = {"events": [{"frame": 4, "kind": "oracle_settled", "settled": True},
                      {"frame": 6, "kind": "oracle_settled", "settled": False}]}
    assert settled_frames(new, 8) == [False] * 4 + [True] * 2 + [False] * 2
