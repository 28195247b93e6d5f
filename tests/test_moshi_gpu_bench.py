"""scripts/gpu_bench.py must be ready to run on a GPU: a dry run on the CPU with the tiny model."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("moshi")

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_bench_dry_run_on_cpu(tmp_path):
    from tandem.audio.frames import write_mono

    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    t = np.arange(24000) / 24000
    wav = tmp_path / "q.wav"
    write_mono(wav, np.concatenate([0.3 * np.sin(2 * np.pi * 220 * t), np.zeros(12000)]).astype(np.float32))
    out = tmp_path / "r.json"
    rc = mod.main(["--tiny", "--device", "cpu", "--frames", "4", "--warmup", "1", "--batch", "1,2", "--wav", str(wav),
                   "--oracle", "the answer is Paris", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert [r["batch"] for r in res["speed"]] == [1, 2]
    assert all(r["rtf"] > 0 and r["step_ms_p99"] >= r["step_ms_p50"] for r in res["speed"])
    assert res["onset"]["speech_end_s"] == pytest.approx(1.0, abs=0.01)
    assert (tmp_path / "r.wav").exists()
