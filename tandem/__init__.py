"""tandem: a fast front-end that never waits, fed by a slow back-end that thinks (KAME-style)."""
import os

# numpy's OpenBLAS starts a thread per core when numpy loads, and after each matrix product (Whisper's
# features) those threads spin waiting for more work: in the Listener a decode kept two cores busy for one
# core's work (cpu/wall 2.0, against 1.0 with one thread), taking the second from the LLM, the frame loop
# and the other decodes. Set before numpy loads, here and in every process started from here (they
# inherit it); a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
