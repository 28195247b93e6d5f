"""The tandem and front-end-only modes end to end on the embedded stack with the shipped model."""
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tandem.audio.frames import write_mono
from tandem.frontends.compact.frontend import CompactFrontEnd
from tandem.frontends.compact.replay import replay
from tandem.bench.scoring import Transcriber, find_answer, speech_end_of
from tandem.record.timeline import load as load_timeline
from tandem.audio.voices import speak

pytestmark = pytest.mark.slow


def run(tmp_path, mode: str, q: np.ndarray):
    inp, out, tl = tmp_path / "q.wav", tmp_path / f"{mode}.wav", tmp_path / f"{mode}.json"
    write_mono(inp, q)
    r = subprocess.run([sys.executable, "-m", "tandem", "run", str(inp), "--mode", mode, "--out", str(out),
                        "--timeline", str(tl)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    data, _ = sf.read(out)
    return data[:, 1].astype(np.float32), load_timeline(tl), r.stdout


def test_tandem_takes_its_turn_quickly_with_oracles_fed(tmp_path):
    q = speak("What is the capital of France?", "flite", lead_s=0.5, tail_s=6.0)
    assistant, tl, stdout = run(tmp_path, "tandem", q)
    end = speech_end_of(q)
    kinds = {e["kind"] for e in tl["events"]}
    assert {"oracle_reset", "oracle_append", "assistant_text"} <= kinds
    assert tl["meta"]["oracle_tokens_fed"] > 0
    loud = np.flatnonzero(np.abs(assistant[int(end * 24000):]) > 0.01)
    assert len(loud) and loud[0] / 24000 < 1.0, "the front-end takes its turn quickly"
    assert sum(1 for t in tl["frames"]["late_ms"] if t > 80) == 0
    # the recorded timeline holds everything the front-end was given: replayed offline, the same
    # checkpoint takes its turn and starts with the same word
    r = replay(tl, CompactFrontEnd(), "q")
    assert r.inputs.vad_source == "timeline"
    assert r.turn_frames_after_end is not None and r.said.split()[:1] == r.recorded_said.split()[:1]


def test_tandem_speaks_the_answer(tmp_path):
    q = speak("What is the capital of France?", "flite", lead_s=0.5, tail_s=6.0)
    assistant, _, _ = run(tmp_path, "tandem", q)
    words = Transcriber().words(assistant)
    assert find_answer(words, ["paris"], after=speech_end_of(q)) is not None, " ".join(w.text for w in words)


def test_frontend_alone_answers_without_oracles(tmp_path):
    q = speak("What is the capital of France?", "flite", lead_s=0.5, tail_s=6.0)
    assistant, tl, _ = run(tmp_path, "frontend", q)
    assert not any(e["kind"] == "oracle_reset" for e in tl["events"])
    assert any(e["kind"] == "assistant_text" for e in tl["events"]), "it says something"
