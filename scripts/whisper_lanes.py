"""How fast is one Whisper decode with 1 or 2 threads, and two decodes at once (the Listener's lanes)?

    python scripts/whisper_lanes.py [--busy]

Decodes the example question cut or padded to 1.5, 3 and 5 s, the settings interleaved so that the
machine's noise falls on both alike, and prints median milliseconds. `--busy` keeps one core busy
meanwhile (as the LLM and the frame loop do under load).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from tandem.audio.frames import SAMPLE_RATE as IN_RATE, load_input, resample
from tandem.listener.whisper import SAMPLE_RATE, ShortContextWhisper

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "question.wav"


def _spin() -> None:
    while True:
        pass


def timed(fn) -> float:  # noqa: ANN001
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()
    audio = resample(load_input(EXAMPLE).samples, IN_RATE, SAMPLE_RATE)
    hog = mp.Process(target=_spin, daemon=True) if args.busy else None
    if hog:
        hog.start()
    models = {1: ShortContextWhisper(threads=1, lanes=2), 2: ShortContextWhisper(threads=2)}
    try:
        for secs in (1.5, 3.0, 5.0):
            n = int(secs * SAMPLE_RATE)
            x = audio[:n] if len(audio) >= n else np.pad(audio, (0, n - len(audio)))
            for m in models.values():
                m.transcribe(x)  # warm-up
            ms: dict[str, list[float]] = {"1 thread": [], "2 threads": [], "2 at once, 1 thread each": []}
            for _ in range(args.reps):
                ms["1 thread"].append(timed(lambda: models[1].transcribe(x)))
                ms["2 threads"].append(timed(lambda: models[2].transcribe(x)))
                pair: list[float] = []
                threads = [threading.Thread(target=lambda: pair.append(timed(lambda: models[1].transcribe(x))))
                           for _ in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                ms["2 at once, 1 thread each"] += pair
            print(f"{secs:.1f} s of speech: " + ", ".join(f"{k} {statistics.median(v):.0f} ms" for k, v in ms.items()))
    finally:
        if hog:
            hog.terminate()


if __name__ == "__main__":
    main()
