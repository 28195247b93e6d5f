#!/usr/bin/env python3
"""Real-time factor and onset latency of the moshi front-end on a GPU (docs/GPU.md).

    # speed of the 7B shapes with random weights (nothing to download), 1, 4 and 16 sessions at once
    .venv/bin/python scripts/gpu_bench.py --random-weights --batch 1,4,16 --out out/gpu_bench.json
    # speed and onset with the real KAME weights, a spoken question and an oracle arriving 0.6 s late
    .venv/bin/python scripts/gpu_bench.py --moshi-weights ~/kame --wav examples/question.wav \
        --oracle "Mount Everest is the tallest mountain in the world." --out out/gpu_bench.json
    # a dry run of this script on a CPU with the tiny random model (what the tests run)
    .venv/bin/python scripts/gpu_bench.py --tiny --device cpu --frames 20 --batch 1,2

Onset here is the front-end alone on its frame clock (plus one step of compute); the whole system
with the Listener and an LLM is `tandem bench --front-end moshi --modes tandem,frontend,cascade`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--moshi-weights", type=Path, help="checkpoint directory (see docs/GPU.md)")
    src.add_argument("--hf-repo", help="fetch the checkpoint from the Hugging Face hub")
    src.add_argument("--random-weights", action="store_true", help="Moshi 7B shapes, random weights: speed only")
    src.add_argument("--tiny", action="store_true", help="the tiny random test model (a dry run on a CPU)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="bf16 (default on cuda), fp16, fp32")
    ap.add_argument("--batch", default="1,4", help="comma-separated batch sizes (sessions stepped together)")
    ap.add_argument("--frames", type=int, default=250, help="timed frames per batch size (250 = 20 s of audio)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--wav", type=Path, default=None, help="a spoken question for the onset measurement")
    ap.add_argument("--oracle", default=None, help="oracle text fed after the end of speech (onset run)")
    ap.add_argument("--oracle-delay", type=float, default=0.6, help="seconds after the end of speech")
    ap.add_argument("--out", type=Path, default=None, help="JSON results (and OUT.wav for the onset run)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    if args.device == "cpu":
        os.environ.setdefault("NO_TORCH_COMPILE", "1")
    import numpy as np
    import torch

    from tandem.frontends.moshi import load
    from tandem.frontends.moshi.speed import measure_onset, measure_speed, random_bundle

    if args.device == "cpu":
        torch.set_num_threads(1)  # steadier step times on a shared CPU
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_bench: no CUDA device visible to torch; use --device cpu for a dry run", file=sys.stderr)
        return 2
    if args.random_weights:
        bundle = random_bundle(args.device, args.dtype, seed=args.seed)
    elif args.tiny:
        from tandem.frontends.moshi.tiny import write_tiny_checkpoint

        bundle = load(write_tiny_checkpoint(tempfile.mkdtemp(prefix="tandem-tiny-")), device=args.device,
                      dtype=args.dtype)
    else:
        bundle = load(args.moshi_weights, args.hf_repo, device=args.device, dtype=args.dtype)
    info = {"device": torch.cuda.get_device_name(0) if bundle.device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "dtype": str(bundle.dtype), "weights": bundle.files.source,
            "lm_params_b": round(sum(p.numel() for p in bundle.lm.parameters()) / 1e9, 3),
            "backfilled_oracle": bundle.backfilled}
    print(json.dumps(info))
    results: dict = {"info": info, "speed": []}
    for b in (int(x) for x in args.batch.split(",") if x.strip()):
        try:
            r = measure_speed(bundle, batch=b, frames=args.frames, warmup=args.warmup, seed=args.seed)
        except torch.cuda.OutOfMemoryError:  # type: ignore[attr-defined]
            r = {"batch": b, "error": "out of GPU memory"}
            torch.cuda.empty_cache()
        print(json.dumps(r))
        results["speed"].append(r)
    if args.wav is not None:
        from tandem.audio.frames import load_input, write_stereo

        user = load_input(args.wav).samples
        onset = measure_onset(bundle, user, args.oracle, args.oracle_delay, seed=args.seed)
        assistant = onset.pop("assistant")
        print(json.dumps(onset))
        results["onset"] = onset
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            n = len(assistant)
            write_stereo(args.out.with_suffix(".wav"), np.pad(user, (0, n - len(user))), assistant, n)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
