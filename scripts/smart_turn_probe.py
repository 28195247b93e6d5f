"""Would Pipecat's Smart Turn v3.2 (audio end-of-turn model, BSD-2, in the pipecat-ai wheel) tell the dev set's
pauses inside a sentence from its turn ends? Its probability of "turn complete" on the user's audio up to
0.2 s after each moment: the pause items' pause (should be low) and end (high), the turn items' and the
interruptions' ends (high), the stories' sentence ends (a listener's backchannel moment).

    pip install --no-deps --target DIR pipecat-ai      # only its model and feature code are used
    python scripts/smart_turn_probe.py FDB_DEV_DIR --pipecat DIR/pipecat [--out docs/smart-turn-probe.json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import soundfile as sf

RATE, WINDOW_S, AFTER_S, LOUD = 16000, 8, 0.2, 0.02


def load(pipecat: Path):  # noqa: ANN201
    import onnxruntime as ort

    spec = importlib.util.spec_from_file_location("whisper_features", pipecat / "audio/turn/smart_turn/_whisper_features.py")
    features = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(features)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    session = ort.InferenceSession(str(pipecat / "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"), sess_options=so)

    def complete(x: np.ndarray) -> tuple[float, float]:
        x = x[-WINDOW_S * RATE:]
        x = np.pad(x, (WINDOW_S * RATE - len(x), 0)).astype(np.float32)
        mel = features.compute_whisper_log_mel_features(x, do_normalize=True)
        t = time.perf_counter()
        p = float(session.run(None, {"input_features": mel[None]})[0][0].item())
        return p, time.perf_counter() - t

    return complete


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dev", type=Path)
    ap.add_argument("--pipecat", type=Path, required=True, help="the installed `pipecat` package folder")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--after", type=float, default=AFTER_S, help="seconds of the audio after each moment it hears")
    args = ap.parse_args()
    complete = load(args.pipecat)
    rows, ms = [], []

    def judge(kind: str, item: Path, x: np.ndarray, t: float, want: bool) -> None:
        p, dt = complete(x[: int((t + args.after) * RATE)])
        ms.append(dt * 1000)
        rows.append({"kind": kind, "item": item.name, "t": round(t, 2), "p_complete": round(p, 3), "should_be_complete": want})

    for item in sorted((args.dev / "synthetic_pause_handling").iterdir()):
        x, _ = sf.read(str(item / "input.wav"), dtype="float32")
        a, _b = json.loads((item / "pause.json").read_text())[0]["timestamp"]
        judge("pause", item, x, a, False)
        judge("pause item's end", item, x, len(x) / RATE - 0.3, True)
    for folder, name, at in (("synthetic_turn_taking", "turn_taking.json", 0), ("synthetic_user_interruption", "interrupt.json", 1)):
        for item in sorted((args.dev / folder).iterdir()):
            x, _ = sf.read(str(item / "input.wav"), dtype="float32")
            judge("turn end" if "turn" in folder else "interruption end", item, x, json.loads((item / name).read_text())[0]["timestamp"][at], True)
    for item in sorted((args.dev / "synthetic_backchannel").iterdir()):
        x, _ = sf.read(str(item / "input.wav"), dtype="float32")
        loud = np.flatnonzero(np.abs(x) > LOUD)
        for g in np.flatnonzero(np.diff(loud) > 0.4 * RATE):
            judge("story sentence end", item, x, (loud[g] + 1) / RATE, False)
    summary = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        rs = [r for r in rows if r["kind"] == kind]
        right = sum((r["p_complete"] > 0.5) == r["should_be_complete"] for r in rs)
        summary[kind] = f"{right}/{len(rs)} judged right"
    summary["after_s"] = args.after
    summary["inference_ms_median"] = round(float(np.median(ms)), 1)
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
