"""The real embedded stack end to end: a spoken question file in, a spoken answer out."""
import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tandem.audio.frames import write_mono
from tandem.bench.scoring import Transcriber, find_answer, speech_end_of
from tandem.record.timeline import load as load_timeline
from tandem.audio.voices import speak

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def transcriber():
    return Transcriber()


@pytest.mark.parametrize("voice, question, answers, pace", [
    ("flite", "What is the capital of France?", ["paris"], "realtime"),
    ("espeak", "Which planet is known as the red planet?", ["mars"], "fast"),
])
def test_cascade_answers_a_spoken_question(tmp_path, transcriber, voice, question, answers, pace):
    q = speak(question, voice, lead_s=0.5, tail_s=5.0)
    inp, out, tl, png = (tmp_path / n for n in ("q.wav", "o.wav", "t.json", "t.png"))
    write_mono(inp, q)
    r = subprocess.run([sys.executable, "-m", "tandem", "run", str(inp), "--mode", "cascade", "--out", str(out),
                        "--timeline", str(tl), "--plot", str(png), "--pace", pace],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    data, rate = sf.read(out)
    timeline = load_timeline(tl)
    extra = timeline["meta"].get("finished_reply_s", 0.0)
    assert rate == 24000 and data.shape[1] == 2, "output is stereo"
    assert data.shape[0] == len(q) if not extra else data.shape[0] > len(q), \
        "as long as the input, or longer where the reply went on past its end (--finish-reply)"
    assert np.allclose(data[: len(q), 0], q, atol=2e-4) and not data[len(q):, 0].any(), "the user on the left, unchanged"
    words = transcriber.words(data[:, 1].astype(np.float32))
    end = speech_end_of(q)
    hit = find_answer(words, answers, after=end)
    assert hit is not None, f"answer {answers} not heard in {' '.join(w.text for w in words)!r}"
    kinds = {e["kind"] for e in timeline["events"]}
    assert {"vad_start", "vad_end", "partial", "final", "llm_start", "llm_first_token", "assistant_text"} <= kinds
    assert len(timeline["frames"]["t"]) == -(-len(q) // 1920) + round(extra / 0.08)
    assert png.stat().st_size > 10_000
    assert "onset latency" in r.stdout
    if pace == "fast":
        assert timeline["meta"]["pace"] == "fast"
