"""--knowledge end to end on the embedded stack: `tandem run` in both modes answers a spoken question
about the example company's documents (facts no LLM knows), and fails loudly on a bad path."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tandem.audio.frames import write_mono
from tandem.bench.scoring import Transcriber, find_answer, speech_end_of
from tandem.record.timeline import load as load_timeline
from tandem.audio.voices import speak

pytestmark = pytest.mark.slow
KNOWLEDGE = Path(__file__).resolve().parent.parent / "examples" / "knowledge"


def run(tmp_path, mode: str, q: np.ndarray, knowledge: Path = KNOWLEDGE):
    inp, out, tl = tmp_path / "q.wav", tmp_path / f"{mode}.wav", tmp_path / f"{mode}.json"
    write_mono(inp, q)
    r = subprocess.run([sys.executable, "-m", "tandem", "run", str(inp), "--mode", mode, "--out", str(out),
                        "--timeline", str(tl), "--knowledge", str(knowledge),
                        "--knowledge-index", str(tmp_path / "index.sqlite")],
                       capture_output=True, text=True, timeout=180)
    return r, out, tl


@pytest.mark.parametrize("mode", ["tandem", "cascade"])
def test_both_modes_answer_from_the_documents(tmp_path, mode):
    q = speak("How many days do I have to return a product?", "festival", lead_s=0.5, tail_s=7.0)
    r, out, tl_path = run(tmp_path, mode, q)
    assert r.returncode == 0, r.stderr
    data, _ = sf.read(out)
    words = Transcriber().words(data[:, 1].astype(np.float32))
    assert find_answer(words, ["forty five", "forty-five", "45"], after=speech_end_of(q)) is not None, \
        " ".join(w.text for w in words)
    tl = load_timeline(tl_path)
    searches = [e for e in tl["events"] if e["kind"] == "retrieval"]
    final_t = next(e["t"] for e in tl["events"] if e["kind"] == "final")
    assert any(e["trigger"] == "partial" and e["t"] < final_t for e in searches), "searched while the user spoke"
    assert any("Returns" in p["title"] for e in searches for p in e.get("passages", []))
    assert sum(1 for t in tl["frames"]["late_ms"] if t > 80) <= 1


def test_a_missing_knowledge_folder_stops_the_tool_with_one_line(tmp_path):
    q = speak("Hello there.", "flite", lead_s=0.2, tail_s=0.5)
    r, _, _ = run(tmp_path, "tandem", q, knowledge=tmp_path / "no-such-folder")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("tandem: error: --knowledge: no such file or folder")
