"""The back-end's child processes (the LLM server, the Listener, the voice): how a death is told to a
user, and a supervisor that restarts a part that died.

A part that dies at start-up stops the tool with one line naming the cause (`describe_exit`). A
part that dies later is restarted by the `Supervisor`'s thread, at most `max_restarts` times in
`window_s`; every fault and every restart is reported to the subscribers (sessions put it on
their timelines) and kept for `/api/status`. Nothing here runs on the frame loop: the check is a
thread that polls, and a restart blocks only that thread.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

log = logging.getLogger(__name__)

# what a user can make of a signal, and what usually sends it
_MEANINGS = {
    signal.SIGILL: "illegal instruction: it was built for a CPU with instructions this one lacks",
    signal.SIGKILL: "killed (by the kernel's out-of-memory killer or by another process)",
    signal.SIGSEGV: "segmentation fault: a crash in native code",
    signal.SIGBUS: "bus error: a crash in native code or a file it mapped changed",
    signal.SIGABRT: "aborted by native code",
    signal.SIGTERM: "terminated by another process",
    signal.SIGFPE: "arithmetic fault in native code",
}


def describe_exit(code: int | None) -> str:
    """'exited with code 1' or 'died of SIGILL (illegal instruction: ...)' for a child's exit code
    (negative for a signal, as subprocess and multiprocessing report it)."""
    if code is None:
        return "is not running"
    if code >= 0:
        return f"exited with code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"died of signal {-code}"
    meaning = _MEANINGS.get(sig)
    return f"died of {sig.name}" + (f" ({meaning})" if meaning else "")


class Part(Protocol):
    """A child process the supervisor watches."""
    name: str

    def alive(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def restart(self) -> None:
        """Start the child again (blocking until it answers); raise when it cannot."""
        ...


class ProcessPart:
    """`alive`, `exit_code` and `pid` of a part whose child is a multiprocessing `Process` in `_proc`."""
    _proc: Any

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.is_alive()

    def exit_code(self) -> int | None:
        return self._proc.exitcode


@dataclass
class PartState:
    name: str
    state: str = "up"  # up | restarting | down
    restarts: int = 0
    faults: int = 0
    last_fault: str | None = None
    last_fault_t: float | None = None
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=64))  # restart times (monotonic)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "restarts": self.restarts, "faults": self.faults,
                "last_fault": self.last_fault,
                "last_fault_ago_s": round(time.monotonic() - self.last_fault_t, 1) if self.last_fault_t else None}


FaultCallback = Callable[[dict[str, Any]], None]


class Supervisor:
    """Watches parts from a thread of its own and restarts the ones that died."""

    def __init__(self, poll_s: float = 0.2, max_restarts: int = 5, window_s: float = 600.0) -> None:
        self.poll_s = poll_s
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._parts: dict[str, Part] = {}
        self.states: dict[str, PartState] = {}
        self._subscribers: dict[int, FaultCallback] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, part: Part) -> None:
        with self._lock:
            self._parts[part.name] = part
            self.states[part.name] = PartState(part.name)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
            self._thread.start()

    def subscribe(self, cb: FaultCallback) -> Callable[[], None]:
        """`cb(event)` for every fault and restart, called from the supervisor's thread. Returns the
        function that unsubscribes."""
        with self._lock:
            key = self._next_id
            self._next_id += 1
            self._subscribers[key] = cb

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.pop(key, None)
        return unsubscribe

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {name: {**st.to_dict(), "pid": getattr(self._parts[name], "pid", None)}
                    for name, st in self.states.items()}

    def report(self, part: str, error: str) -> None:
        """A fault a part noticed itself without dying (a hung voice, say), for the timelines."""
        self._emit({"part": part, "action": "fault", "error": error})

    def _emit(self, event: dict[str, Any]) -> None:
        with self._lock:
            subs = list(self._subscribers.values())
        for cb in subs:
            try:
                cb(event)
            except Exception:  # noqa: BLE001 - a session that went away must not stop the supervisor
                log.exception("fault subscriber failed")

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self._lock:
                parts = list(self._parts.values())
            for part in parts:
                st = self.states[part.name]
                if st.state == "down" or part.alive():
                    continue
                self._recover(part, st)

    def _recover(self, part: Part, st: PartState) -> None:
        error = f"{part.name} {describe_exit(part.exit_code())}"
        now = time.monotonic()
        st.faults += 1
        st.last_fault, st.last_fault_t = error, now
        while st.recent and now - st.recent[0] > self.window_s:
            st.recent.popleft()
        if len(st.recent) >= self.max_restarts:
            st.state = "down"
            log.error("%s; not restarted: %d restarts in the last %.0f s", error, len(st.recent), self.window_s)
            self._emit({"part": part.name, "action": "down", "error": error})
            return
        st.state = "restarting"
        log.error("%s; restarting it", error)
        self._emit({"part": part.name, "action": "restarting", "error": error})
        st.recent.append(now)
        try:
            part.restart()
        except Exception as e:  # noqa: BLE001 - told to the user through status and timelines
            # still dead: the next poll tries again, until the restart limit marks it down
            log.error("%s could not be restarted: %s", part.name, e)
            self._emit({"part": part.name, "action": "restart_failed", "error": f"{error}; restart failed: {e}"})
            return
        st.restarts += 1
        st.state = "up"
        log.warning("%s is back after %.1f s", part.name, time.monotonic() - now)
        self._emit({"part": part.name, "action": "restarted", "error": error,
                    "down_s": round(time.monotonic() - now, 2)})

    def close(self) -> None:
        """Stop watching (before the parts are stopped on purpose, so that is not a fault)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
