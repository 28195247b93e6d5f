"""Full-Duplex-Bench's own evaluation functions over the outputs of `tandem bench --fdb`, to show both give the
same numbers (docs/BENCHMARKS.md, "Full-Duplex-Bench").

    python scripts/fdb_crosscheck.py FDB/v1_v1.5/evaluation OUT [--path DIR ...]

FDB is a checkout of the public repository DanielLin94144/Full-Duplex-Bench (not part of this project). Its
backchannel script needs `silero_vad` and `scipy` (e.g. `pip install --target DIR --no-deps silero-vad scipy`,
given with --path) and reads wav files with torchaudio; where torchaudio is missing, a stand-in that reads
them with soundfile is used (file reading only: the VAD and the rules are FDB's). The interruption script
asks GPT-4-turbo for a relevance rating: a stand-in judge answers 3, so only its TOR and latency are compared.
The backchannel script's timing truth is people's on FDB's ICC items (icc_gt_distribution.json); for other
items a flat one is written in a temporary folder, so its JSD is not meaningful there.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import types
from pathlib import Path

class StandInJudge:
    """The OpenAI client's one call FDB's interruption script makes, answered with a fixed rating."""

    class chat:
        class completions:
            @staticmethod
            def create(**_: object) -> object:
                msg = types.SimpleNamespace(content="Analysis: not judged.\nI would rate the AI's response as 3.")
                return types.SimpleNamespace(choices=[types.SimpleNamespace(message=msg)])


def _torchaudio_stand_in() -> None:
    try:
        import torchaudio  # noqa: F401
    except ImportError:
        import soundfile as sf
        import torch

        def load(path: str):  # noqa: ANN202
            x, sr = sf.read(path, dtype="float32", always_2d=True)
            return torch.from_numpy(x.T.copy()), sr

        sys.modules["torchaudio"] = types.SimpleNamespace(load=load, __version__="stand-in")


def _result(fn, *args) -> str:  # noqa: ANN001
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args)
    out = buf.getvalue()
    return out[out.rfind("[Result]"):].strip() if "[Result]" in out else out[-400:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("evaluation", type=Path, help="FDB's v1_v1.5/evaluation folder")
    ap.add_argument("out", type=Path, help="the --out of `tandem bench --fdb`")
    ap.add_argument("--path", action="append", default=[], help="folders to import from (silero_vad, scipy)")
    args = ap.parse_args()
    sys.path[:0] = [str(args.evaluation), *args.path]
    _torchaudio_stand_in()
    from eval_backchannel import eval_backchannel
    from eval_pause_handling import eval_pause_handling
    from eval_smooth_turn_taking import eval_smooth_turn_taking
    from eval_user_interruption import eval_user_interruption

    for mode in sorted(p for p in args.out.iterdir() if p.is_dir()):
        for task_dir in sorted(p for p in mode.iterdir() if p.is_dir()):
            name = task_dir.name
            if "user_backchannel" in name:
                continue  # not an FDB v1 task: scored here only (talk_through)
            print(f"== {mode.name} / {name}")
            if "pause" in name:
                print(_result(eval_pause_handling, str(task_dir)))
            elif "turn_taking" in name:
                print(_result(eval_smooth_turn_taking, str(task_dir)))
            elif "interruption" in name:
                print(_result(eval_user_interruption, str(task_dir), StandInJudge))
            elif "backchannel" in name:
                ids = [i.name for i in task_dir.iterdir() if i.name.isdigit()]
                with tempfile.TemporaryDirectory() as tmp:  # flat truth: the ids are not FDB's ICC items
                    Path(tmp, "icc_gt_distribution.json").write_text(json.dumps({i: [1.0] * 100 for i in ids}))
                    here = os.getcwd()
                    os.chdir(tmp)  # the script reads ./icc_gt_distribution.json
                    try:
                        print(_result(eval_backchannel, str(task_dir)))
                    finally:
                        os.chdir(here)
    return 0


if __name__ == "__main__":
    sys.exit(main())
