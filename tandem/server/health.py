"""The server's health, as `/api/status` shows it beside the ticker's own counts: garbage-collector
pauses, ticks a busy machine held up, the shared back-end (LLM queue, child processes, dropped
frames) and what a leak would show (threads, file descriptors, Listener streams, front-end rows)."""
from __future__ import annotations

import os
import threading
from collections import deque
from typing import Any

from ..runtime.realtime import GcWatch, runqueue_wait_ns, stolen_ms
from .shared import Backend


class Health:
    """What the hub reports besides its ticks: read on request, except `note_stall` (once a tick)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.gc = GcWatch()
        self.stalls: deque[dict[str, float]] = deque(maxlen=50)  # late ticks and the CPU wait behind them
        self._last_wait_ns: int | None = None
        self._last_steal: float | None = None

    def note_stall(self, target: float, done: float) -> None:
        """A tick that finished more than 60 ms after its deadline: record how long this thread
        waited for a CPU meanwhile (the kernel's run-queue wait), which tells a machine too busy
        to run the server from a server that held itself up."""
        wait_ns, steal = runqueue_wait_ns(), stolen_ms()
        late_ms = (done - target) * 1e3
        if late_ms > 60 and wait_ns is not None and self._last_wait_ns is not None:
            stall = {"late_ms": round(late_ms, 1), "runqueue_wait_ms": round((wait_ns - self._last_wait_ns) / 1e6, 1)}
            if steal is not None and self._last_steal is not None:
                stall["steal_ms"] = round(steal - self._last_steal, 1)  # the hypervisor's, summed over the cores
            self.stalls.append(stall)
        self._last_wait_ns, self._last_steal = wait_ns, steal

    def status(self) -> dict[str, Any]:
        llm = self.backend.llm
        return {
            "llm": {"waiting": llm.waiting, "running": llm.running} if llm else None,
            "resources": self.resources(),
            "backend": self.backend_health(),
            "gc": {"count": list(self.gc.count), "max_ms": [round(x, 2) for x in self.gc.max_ms]},
            "stalls": list(self.stalls),
        }

    def backend_health(self) -> dict[str, Any]:
        """Each child process: up, restarting or down, its restarts and last fault; and what the
        bounded queues in front of them dropped."""
        b = self.backend
        out: dict[str, Any] = b.supervisor.status() if b.supervisor is not None else {}
        dropped = getattr(b.listener, "dropped_frames", None)
        if dropped is not None:
            out.setdefault("Listener", {})["dropped_frames"] = dropped
        timeouts = getattr(b.tts, "timeouts", None)
        if timeouts is not None:
            out.setdefault("voice", {})["timeouts"] = timeouts
        return out

    def resources(self) -> dict[str, Any]:
        """What a leak would show: this process's threads and file descriptors, open Listener streams,
        front-end rows in use (where the front-end has a shared pool)."""
        import psutil

        listener = self.backend.listener
        streams = getattr(listener, "_callbacks", None)
        if streams is None:
            streams = getattr(listener, "callbacks", {})
        pool = getattr(self.backend.front_ends, "pool", None)
        try:
            fds = len(os.listdir("/proc/self/fd"))
        except OSError:
            fds = -1
        return {"threads": threading.active_count(), "fds": fds, "listener_streams": len(streams),
                "front_end_rows": getattr(pool, "in_use", None),
                "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1)}

    def close(self) -> None:
        self.gc.close()
