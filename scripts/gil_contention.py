"""How much one busy Python thread slows the compact front-end's step, at several GIL switch intervals.

Every torch op of the step gives the GIL up; with another thread running Python meanwhile, taking it
back waits up to the switch interval, at every op. Run: `python scripts/gil_contention.py` (about 30 s);
prints the step's median, p90 and max over 100 steps, alone and beside a busy thread.
"""
from __future__ import annotations

import sys
import threading
import time

import numpy as np
import torch

from tandem.speak import frontend as fe
from tandem.speak.frontend import UserFrame

INTERVALS_S = (0.005, 0.001, 0.0002, 0.00005)


def measure(front_end, user: UserFrame, pad: int, label: str, steps: int = 100) -> None:
    ts = []
    for _ in range(steps):
        t = time.perf_counter()
        front_end.step(user, pad)
        ts.append((time.perf_counter() - t) * 1e3)
    print(f"{label:36s} median {np.median(ts):6.1f}  p90 {np.percentile(ts, 90):6.1f}  max {max(ts):6.1f} ms")


def main() -> None:
    torch.set_num_threads(1)
    front_end = fe.build("compact")
    pad = front_end.tokenizer.pad_id
    user = UserFrame(audio=np.zeros(1920, np.float32), vad_prob=0.0, in_speech=False, transcript="")
    for _ in range(20):  # warm-up
        front_end.step(user, pad)
    measure(front_end, user, pad, "alone")
    stop = threading.Event()

    def busy() -> None:
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i

    threading.Thread(target=busy, daemon=True).start()
    before = sys.getswitchinterval()
    try:
        for interval in INTERVALS_S:
            sys.setswitchinterval(interval)
            measure(front_end, user, pad, f"busy thread, switch {interval * 1e3:g} ms")
    finally:
        stop.set()
        sys.setswitchinterval(before)


if __name__ == "__main__":
    main()
