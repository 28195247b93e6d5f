"""The session clock: seconds since the session started, on which every event is stamped.

In `realtime` pace it is the wall clock. In `fast` pace the frame loop skips the waits during which
nothing is in flight in the back-end (no Listener decode, no LLM request, no speech synthesis);
the skipped time is subtracted, so every back-end latency stamped on this clock is real wall time
while the idle stretches between them cost nothing.
"""
from __future__ import annotations

import asyncio
import time


class SessionClock:
    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self._skipped = 0.0

    def start_at(self, t0: float) -> None:
        """Make the `time.perf_counter()` instant `t0` session time 0 (a server's shared ticker)."""
        self._t0 = t0
        self._skipped = 0.0

    def now(self) -> float:
        return time.perf_counter() - self._t0 + self._skipped

    def skip_to(self, t: float) -> None:
        """Advance the clock to `t` without waiting (fast pace)."""
        ahead = t - self.now()
        if ahead > 0:
            self._skipped += ahead

    async def sleep_until(self, t: float) -> None:
        # asyncio.sleep is coarse; sleep most of the way, then yield until the deadline
        while True:
            ahead = t - self.now()
            if ahead <= 0:
                return
            await asyncio.sleep(ahead if ahead > 0.002 else 0)
