"""A follow-up on the real stack (Listener, embedded LLM, voice, shipped front-end): the second
question only makes sense with the first, so the back-end must see the dialogue so far."""
import subprocess
import sys

import numpy as np
import pytest

from tandem.audio.frames import write_mono
from tandem.record.timeline import load as load_timeline
from tandem.audio.voices import speak

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["tandem", "cascade"])
def test_a_follow_up_is_asked_with_the_earlier_turns_and_answered(tmp_path, mode):
    first = speak("What is the capital of France?", "flite", lead_s=0.5, tail_s=5.0)
    second = speak("And of Germany?", "flite", lead_s=0.0, tail_s=6.0)
    track = np.concatenate([first, second])
    inp, out, tlp = tmp_path / "in.wav", tmp_path / "out.wav", tmp_path / "tl.json"
    write_mono(inp, track)
    r = subprocess.run([sys.executable, "-m", "tandem", "run", str(inp), "--mode", mode, "--out", str(out),
                        "--timeline", str(tlp)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    tl = load_timeline(tlp)
    second_start = len(first) / 24000
    finals = [e for e in tl["events"] if e["kind"] == "final" and e["text"].strip()]
    assert len(finals) >= 2 and "germany" in finals[-1]["text"].lower(), finals
    # the request for the follow-up holds the first question and what the assistant said to it
    asks = [e for e in tl["events"] if e["kind"] == "llm_start" and e["t"] > second_start]
    assert asks, "the follow-up started an LLM request"
    prompt = (" ".join(asks[-1].get("history", [])) + "\n" + asks[-1]["prompt"]).lower()
    assert "france" in prompt and "germany" in prompt
    said_first = " ".join(e.get("text", "") for e in tl["events"]
                          if e["kind"] == "assistant_text" and e["t"] < second_start)
    assert said_first.strip(), "the first question was answered"
    assert "assistant:" in prompt, "the request shows the assistant's reply as said"
    replies = [e for e in tl["events"] if e["kind"] == "assistant_text" and e["t"] > finals[-1]["t"] - 1.0]
    assert replies, "the follow-up got a reply"
    assert sum(1 for t in tl["frames"]["late_ms"] if t > 80) == 0
