"""Keeping the 80 ms frame loop on time on a small machine, and saying why when it was not.

Every command that runs sessions (`run`, `bench`, `serve`) shares the process with models, a voice
and threads, and shares the cores with the back-end's processes. Three things stall a frame there:
a full garbage collection (it walks every object, the models' included: 100-150 ms here), a thread
holding the GIL while the step's torch ops wait to get it back, and the Listener or the LLM holding
both cores. `favour_the_frame_loop` removes what it can of each; `FrameWatch` records, for a frame
that missed its deadline anyway, which of them it was.
"""
from __future__ import annotations

import atexit
import gc
import logging
import os
import resource
import sys
import time
from typing import Callable, Iterable, NamedTuple, Optional

from ..audio.frames import FRAME_S
from ..record.timeline import DEADLINE_MISS, Timeline

log = logging.getLogger(__name__)
FRAME_MS = FRAME_S * 1e3

BACKEND_NICE = 10  # niceness of the Listener (0: leave the back-end alone)
# niceness of the embedded LLM, which runs in a session of its own (local_server.py): with the kernel's
# autogroup scheduling that session is a CPU group whose niceness is set with it (`_nice_own_session`). 0: the
# LLM had a core when it wanted one in every measurement here. The 10, then 18, it was given before counted for
# nothing (its threads' niceness ranks them only inside its own group); where it did count (the LLM kept in our
# group, 4 sessions side by side, docs/history/BENCHMARKS-rounds.md ninth round), its median time to first token went from
# 0.13-0.16 s to 0.62-0.80 s at 10 and 0.33-0.41 s at 5, and 81-84% of the answers came within 4 s against 94%
LLM_NICE = 0
SWITCH_INTERVAL_S = 0.001  # CPython's default, 5 ms, is how long a step's torch op may wait for the GIL


def deprioritize(pids: Iterable[int], nice: int) -> None:
    """Lower the CPU priority of the back-end processes (Listener, embedded LLM). On a small machine
    they compete with the frame loop for the same cores; a late Whisper decode costs a little
    latency, a late frame costs every session an audible gap. Every thread is reniced: on Linux a
    niceness belongs to a thread, and the workers (Whisper's decodes, llama.cpp's compute threads)
    were started before this runs (threads started later inherit it from the ones that start them)."""
    import psutil

    for pid in pids:
        try:
            tids = [t.id for t in psutil.Process(pid).threads()]
        except (psutil.Error, OSError) as e:
            log.warning("could not lower the priority of process %s: %s", pid, e)
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), nice))
            except ProcessLookupError:  # a thread that ended meanwhile
                pass
            except OSError as e:
                log.warning("could not lower the priority of thread %s of process %s: %s", tid, pid, e)
        _nice_own_session(pid, nice)


def autogroup_nice(pid: int) -> int | None:
    """The niceness of the autogroup (a session's CPU group) that `pid` runs in; None where the kernel has
    no autogroup scheduling or the process is in the default group, whose /proc/PID/autogroup is empty
    (a process in the session of a container's init, as in CI)."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            text = f.read()
    except OSError:
        return None
    _, sep, nice = text.partition(" nice ")
    return int(nice) if sep else None


def _nice_own_session(pid: int, nice: int) -> None:
    """A process in a session of its own is, with the kernel's autogroup scheduling (Linux's default), in
    a CPU group of its own that shares the cores equally with ours whatever its threads' niceness: the
    group's own niceness (/proc/PID/autogroup) is lowered too (the embedded LLM's, local_server.py)."""
    try:
        if os.getsid(pid) == os.getsid(0):
            return
        if autogroup_nice(pid) is not None:
            with open(f"/proc/{pid}/autogroup", "w") as f:
                f.write(str(nice))
    except OSError as e:
        log.warning("process %s runs in a session of its own and its CPU group's priority could not be lowered: %s",
                    pid, e)


def settle_heap() -> None:
    """Collect, then move everything alive out of the collector's sight. Call it with the models
    loaded and no session running: what is alive then lives as long as the process (or the run), and
    a full collection no longer walks it in the middle of a frame. What an earlier call froze is
    thawed and collected first, so a process that settles between sessions (`tandem bench`) does not
    keep the cycles of sessions since ended; at exit everything is thawed, so that native objects in
    cycles are freed (nanobind reports those it finds alive at exit as leaks)."""
    global _THAW_AT_EXIT
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    if not _THAW_AT_EXIT:
        atexit.register(gc.unfreeze)
        _THAW_AT_EXIT = True


_THAW_AT_EXIT = False


def favour_the_frame_loop(nices: dict[int, int]) -> None:
    """Everything this process can do for its frame loop: the back-end processes reniced (`nices`: pid ->
    niceness, 0 leaving one as it is), the heap settled, the GIL handed back sooner."""
    for pid, nice in nices.items():
        if nice:
            deprioritize([pid], nice)
    settle_heap()
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def renice_on_restart(nice: int, pid_of: Callable[[str], int | None], parts: set[str]) -> Callable[[dict], None]:
    """A supervisor subscriber: a restarted back-end part yields to the frame loop as the first did."""

    def renice(event: dict) -> None:
        if nice and event.get("action") == "restarted" and event.get("part") in parts:
            pid = pid_of(event["part"])
            if pid:
                deprioritize([pid], nice)
    return renice


class GcWatch:
    """How long the garbage collector stops the process (every thread, the frame loop included):
    per generation the count and the longest pause, and the total since it started."""

    def __init__(self) -> None:
        self.max_ms = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.total_ms = 0.0
        self._t0 = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            ms = (time.perf_counter() - self._t0) * 1e3
            g = info.get("generation", 2)
            self.count[g] += 1
            self.max_ms[g] = max(self.max_ms[g], ms)
            self.total_ms += ms

    def close(self) -> None:
        if self._cb in gc.callbacks:
            gc.callbacks.remove(self._cb)


def runqueue_wait_ns() -> int | None:
    """Nanoseconds this thread has spent runnable but waiting for a CPU (Linux schedstat), or None."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def disk_waits() -> tuple[int, int]:
    """This thread's waits for the disk so far: its major page faults, and the 512-byte blocks its reads
    took from the disk (a file not in the page cache: a module imported late, a file opened in a step)."""
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return ru.ru_majflt, ru.ru_inblock


_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
_steal: tuple[float, float | None] = (-1.0, None)  # (perf_counter when read, the reading)


def stolen_ms() -> float | None:
    """CPU time the hypervisor gave to others while this machine's cores wanted to run, summed over the
    cores, since boot (the `steal` column of /proc/stat; None where there is none). A virtual machine's
    thread does not run then, and with the kernel's paravirtual time accounting that time counts neither
    as its CPU time nor as its wait for a CPU: without this it reads as "blocked". The column moves in
    10 ms ticks, so a reading is kept for 5 ms (every session marks each frame twice)."""
    global _steal
    now = time.perf_counter()
    if now - _steal[0] < 0.005:
        return _steal[1]
    try:
        with open("/proc/stat", "rb") as f:
            value: float | None = int(f.readline().split()[8]) * _TICK_MS
    except (OSError, ValueError, IndexError):
        value = None
    _steal = (now, value)
    return value


class Snapshot(NamedTuple):
    gc_ms: float  # the process's collector pauses so far
    runqueue_ns: Optional[int]  # this thread's wait for a CPU so far (None: no schedstat)
    cpu_ns: int  # this thread's CPU time so far
    major_faults: int  # this thread's page faults that waited for the disk so far
    steal_ms: Optional[float] = None  # the machine's stolen time so far (`stolen_ms`)
    disk_blocks: int = 0  # 512-byte blocks this thread's reads took from the disk so far


class FrameWatch:
    """Where a frame's time went, kept only for one that missed: the collector's pauses (on any
    thread: each stops them all), this thread's own CPU time (the step's work), its wait for a CPU
    (the cores were busy elsewhere), and the rest, blocked (on the GIL, a lock, or asleep). Two causes
    of "blocked" are counted to rule in or out (two stalls of 130 and 290 ms blocked in the thirteenth
    round's sweeps were left unexplained): the thread's waits for the disk (page faults, and reads), and
    the time the hypervisor ran something else on the machine's cores (steal)."""

    def mark(self) -> Snapshot:
        faults, blocks = disk_waits()
        return Snapshot(_process_gc().total_ms, runqueue_wait_ns(), time.thread_time_ns(), faults, stolen_ms(), blocks)

    @staticmethod
    def between(a: Snapshot, b: Snapshot, wall_ms: float) -> dict[str, float]:
        """Where the `wall_ms` from mark `a` to mark `b` went (ms)."""
        cpu = (b.cpu_ns - a.cpu_ns) / 1e6
        out = {"wall_ms": round(wall_ms, 1), "gc_ms": round(b.gc_ms - a.gc_ms, 1), "cpu_ms": round(cpu, 1)}
        wait = 0.0
        if a.runqueue_ns is not None and b.runqueue_ns is not None:
            wait = (b.runqueue_ns - a.runqueue_ns) / 1e6
            out["cpu_wait_ms"] = round(wait, 1)
        out["blocked_ms"] = round(max(0.0, wall_ms - cpu - wait), 1)
        if b.major_faults > a.major_faults:
            out["major_faults"] = b.major_faults - a.major_faults
        if b.disk_blocks > a.disk_blocks:
            out["disk_read_kb"] = (b.disk_blocks - a.disk_blocks) // 2
        if a.steal_ms is not None and b.steal_ms is not None and b.steal_ms > a.steal_ms:
            out["steal_ms"] = round(b.steal_ms - a.steal_ms, 1)
        return out


class StepWatch:
    """A session's steps watched: marks at each step's start and end (FrameWatch.mark), and a step that missed
    its deadline explained on the timeline: where its time went before it began (the loop busy elsewhere) and
    in it, each split into collector pauses, own CPU, waiting for a CPU and blocked (GIL, locks)."""

    def __init__(self) -> None:
        self.watch = FrameWatch()
        self._end = self._start = Snapshot(0.0, None, 0, 0)
        self._end_p = 0.0

    def begin(self) -> None:
        self._end, self._end_p = self.watch.mark(), time.perf_counter()

    def started(self) -> None:
        self._start = self.watch.mark()

    def ended(self, timeline: Timeline, k: int, late_ms: float, step_ms: float, p0: float, p1: float) -> None:
        end = self.watch.mark()
        if late_ms + step_ms > FRAME_MS:
            before = FrameWatch.between(self._end, self._start, (p0 - self._end_p) * 1e3)
            step = FrameWatch.between(self._start, end, step_ms)
            timeline.add(DEADLINE_MISS, frame=k, late_ms=round(late_ms, 1), step_ms=round(step_ms, 1),
                         before=before, step=step)
            log.info("frame %d missed its deadline (late %.0f ms, step %.0f ms): before the step %s; in the step %s",
                     k, late_ms, step_ms, before, step)
        self._end, self._end_p = end, p1


_GC: GcWatch | None = None


def _process_gc() -> GcWatch:
    """One watch of the collector for the whole process, however many sessions read it."""
    global _GC
    if _GC is None:
        _GC = GcWatch()
    return _GC
