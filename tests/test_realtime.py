"""The frame loop's guards (realtime.py): a late frame says where its time went, and the stack
leaves the frame loop the cores, the GIL and a heap the collector does not walk."""
import gc
import os
import sys
import time

import numpy as np
import psutil

from fakes import FakeFrontEnd, FakeListener
from tandem.record import timeline as tl
from tandem.audio.frames import FRAME_SAMPLES
from tandem.runtime.realtime import BACKEND_NICE, FrameWatch, Snapshot, autogroup_nice, settle_heap
from tandem.turn.session import Session, SessionConfig


class StallingFrontEnd(FakeFrontEnd):
    """A fake front-end whose step at frame `at` stalls in the way given."""

    def __init__(self, at: int, how: str) -> None:
        super().__init__()
        self.at, self.how, self.k = at, how, 0

    def step(self, user, oracle_token):
        if self.k == self.at:
            if self.how == "sleep":  # blocked: the thread holds no CPU (as when waiting for the GIL)
                time.sleep(0.15)
            elif self.how == "spin":  # its own work
                end = time.thread_time() + 0.15
                while time.thread_time() < end:
                    pass
            elif self.how == "collect":
                junk = [[i] for i in range(300_000)]  # noqa: F841 - objects for the collector to walk
                for _ in range(8):  # 300-400 ms here; well over a frame on a CPU several times faster
                    gc.collect()
        self.k += 1
        return super().step(user, oracle_token)


async def run_with(fe: FakeFrontEnd, secs: float = 1.2) -> Session:
    sess = Session(SessionConfig(mode="frontend", frame_vad=False), FakeListener([]), None, front_end=fe)
    await sess.run(np.zeros((int(secs / 0.08), FRAME_SAMPLES), np.float32))
    return sess


async def test_a_late_frame_says_it_was_blocked_not_busy():
    sess = await run_with(StallingFrontEnd(5, "sleep"))
    (miss,) = [e for e in sess.timeline.of_kind(tl.DEADLINE_MISS) if e["frame"] == 5]
    step = miss["step"]
    assert step["wall_ms"] >= 140 and step["blocked_ms"] >= 120 and step["cpu_ms"] < 40, miss


async def test_a_late_frame_says_it_was_its_own_work():
    sess = await run_with(StallingFrontEnd(5, "spin"))
    (miss,) = [e for e in sess.timeline.of_kind(tl.DEADLINE_MISS) if e["frame"] == 5]
    assert miss["step"]["cpu_ms"] >= 120, miss


async def test_a_late_frame_says_the_collector_stopped_it_and_the_next_says_it_started_late():
    sess = await run_with(StallingFrontEnd(5, "collect"))
    misses = {e["frame"]: e for e in sess.timeline.of_kind(tl.DEADLINE_MISS)}
    assert misses[5]["step"]["gc_ms"] > 0.5 * misses[5]["step"]["wall_ms"], misses
    assert misses[6]["late_ms"] > 80 and misses[6]["step_ms"] < 40, "the stall carried over as lateness"


async def test_frames_on_time_leave_no_miss():
    sess = await run_with(FakeFrontEnd())
    assert not sess.timeline.of_kind(tl.DEADLINE_MISS)


def test_between_splits_wall_time_and_never_goes_negative():
    a = Snapshot(10.0, 1_000_000, 5_000_000, 7, 40.0)
    b = Snapshot(30.0, 21_000_000, 15_000_000, 7, 40.0)
    got = FrameWatch.between(a, b, 100.0)
    assert got == {"wall_ms": 100.0, "gc_ms": 20.0, "cpu_ms": 10.0, "cpu_wait_ms": 20.0, "blocked_ms": 70.0}
    assert FrameWatch.between(a, b, 5.0)["blocked_ms"] == 0.0
    assert "cpu_wait_ms" not in FrameWatch.between(Snapshot(0.0, None, 0, 0), Snapshot(0.0, None, 0, 0), 1.0)
    assert FrameWatch.between(a, b._replace(major_faults=9), 100.0)["major_faults"] == 2
    assert FrameWatch.between(a, b._replace(disk_blocks=2048), 100.0)["disk_read_kb"] == 1024
    assert FrameWatch.between(a, b._replace(steal_ms=100.0), 100.0)["steal_ms"] == 60.0, "the machine's stolen time"
    assert "steal_ms" not in FrameWatch.between(a._replace(steal_ms=None), b._replace(steal_ms=100.0), 100.0)


def test_stolen_ms_reads_the_steal_column_and_keeps_a_reading_briefly():
    from tandem.runtime.realtime import stolen_ms

    first = stolen_ms()
    assert first is not None and first >= 0.0, "Linux has a steal column"
    assert stolen_ms() == first, "read again within 5 ms: the same reading"
    time.sleep(0.01)
    assert stolen_ms() >= first, "it never goes back"


def test_a_mark_counts_this_threads_page_faults_that_waited_for_the_disk(tmp_path):
    """A page read from a file not yet in memory is a major fault of the thread that touched it."""
    import mmap
    import os

    from tandem.runtime.realtime import disk_waits

    path = tmp_path / "cold.bin"
    path.write_bytes(os.urandom(4 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # written back first: a dirty page stays in the cache
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache, as a reclaimer would leave it
        before = FrameWatch().mark()
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as m:
            sum(m[i] for i in range(0, len(m), 4096))
        after = FrameWatch().mark()
    finally:
        os.close(fd)
    assert disk_waits()[0] >= after.major_faults > before.major_faults


def test_a_mark_counts_this_threads_reads_from_the_disk(tmp_path):
    """A file read when it is not in the page cache (a module imported late, on a machine whose reclaimer
    dropped it) blocks the frame loop on the disk without a page fault."""
    import os

    path = tmp_path / "cold.bin"
    path.write_bytes(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        before = FrameWatch().mark()
        while os.read(fd, 1 << 16):
            pass
        after = FrameWatch().mark()
    finally:
        os.close(fd)
    assert FrameWatch.between(before, after, 10.0).get("disk_read_kb", 0) >= 512, "most of the 1 MiB from the disk"


def test_settle_heap_hides_what_is_alive_from_the_collector():
    keep = [[i] for i in range(1000)]
    assert any(o is keep[500] for o in gc.get_objects()), "a new object is in the collector's generations"
    settle_heap()
    assert not any(o is keep[500] for o in gc.get_objects()), "frozen: no collection walks it"
    assert gc.get_freeze_count() >= 1000
    del keep


def test_the_stack_lowers_its_back_end_below_the_frame_loop():
    from tandem.runtime.stack import Stack, StackConfig

    with Stack(StackConfig(need_llm=False, need_tts=False)) as stack:
        (pid,) = stack.pids()
        nices = {os.getpriority(os.PRIO_PROCESS, t.id) for t in psutil.Process(pid).threads()}
        assert nices == {BACKEND_NICE}, "every thread of the Listener, its decode workers included"
        assert os.getpriority(os.PRIO_PROCESS, 0) < BACKEND_NICE, "the frame loop itself is not lowered"
        assert sys.getswitchinterval() <= 0.001 + 1e-9


def test_misses_are_counted_by_what_mostly_made_them_late():
    from tandem.record.metrics import count_causes, miss_cause

    step = {"wall_ms": 100.0, "gc_ms": 60.0, "cpu_ms": 70.0, "cpu_wait_ms": 0.0, "blocked_ms": 30.0}
    quiet = {"wall_ms": 1.0, "gc_ms": 0.0, "cpu_ms": 1.0, "cpu_wait_ms": 0.0, "blocked_ms": 0.0}
    assert miss_cause({"late_ms": 1.0, "step_ms": 100.0, "step": step, "before": quiet}) == "gc"
    waiting = {**step, "gc_ms": 0.0, "cpu_ms": 10.0, "cpu_wait_ms": 80.0, "blocked_ms": 10.0}
    assert miss_cause({"late_ms": 1.0, "step_ms": 100.0, "step": waiting, "before": quiet}) == "cpu_wait"
    assert miss_cause({"late_ms": 90.0, "step_ms": 1.0, "step": quiet, "before": waiting}) == "late:cpu_wait"
    stolen = {**quiet, "wall_ms": 130.0, "blocked_ms": 129.0, "steal_ms": 260.0}  # both cores taken 130 ms
    assert miss_cause({"late_ms": 130.0, "step_ms": 1.0, "step": quiet, "before": stolen}) == "late:steal"
    assert miss_cause({"late_ms": 130.0, "step_ms": 1.0, "step": quiet,
                       "before": {**stolen, "steal_ms": 20.0}}) == "late:blocked", "a little steal inside a long block"
    assert count_causes([{"miss_causes": ["gc", "blocked"]}, {"miss_causes": ["gc"]}, {}]) == "gc 2, blocked 1"
    assert count_causes([{}]) is None


def test_settling_again_collects_cycles_that_died_since_the_last_settle():
    class Node:
        pass

    settle_heap()
    a = Node()
    a.me = a  # a cycle: only the collector frees it
    settle_heap()  # frozen while alive
    frozen = gc.get_freeze_count()
    import weakref

    gone = weakref.ref(a)
    del a
    settle_heap()
    assert gone() is None, "the thaw before collecting frees a cycle frozen while it was alive"
    assert gc.get_freeze_count() < frozen + 10


def test_the_embedded_llm_and_the_listener_run_at_their_own_niceness(monkeypatch):
    """`llm_nice` and `backend_nice`: the embedded LLM (here a fake server program standing in for it) and the
    Listener each below the frame loop, at a niceness of their own, every thread of them (and the LLM's CPU
    group, its session's, under autogroup scheduling)."""
    from pathlib import Path

    from tandem.runtime.stack import Stack, StackConfig

    fake = Path(__file__).parent / "fake_llm_process.py"
    monkeypatch.setenv("TANDEM_LLM_SERVER_CMD", f"{sys.executable} {fake}")
    with Stack(StackConfig(need_tts=False, llm_nice=3, backend_nice=7)) as stack:
        nices = {os.getpriority(os.PRIO_PROCESS, t.id) for t in psutil.Process(stack.server.pid).threads()}
        assert nices == {3}, "lower than the Listener's is kept: the LLM was never reniced to the Listener's first"
        listener = {os.getpriority(os.PRIO_PROCESS, t.id) for t in psutil.Process(stack.listener.pid).threads()}
        assert listener == {7}
        if autogroup_nice(stack.server.pid) is not None:  # the LLM's session is a CPU group of its own
            assert autogroup_nice(stack.server.pid) == 3, "the group's niceness, which is what counts there"
