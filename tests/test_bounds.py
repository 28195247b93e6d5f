"""Queues in front of slow parts are bounded, and say what they dropped: nothing piles up without
end when a part falls behind or hangs (the Listener's feed is tested in test_supervision.py)."""
from __future__ import annotations

import threading
import time

import numpy as np

from fakes import FakeFrontEnd, FakeListener, FakeTTS
from tandem.turn.session import Session, SessionConfig
from tandem.speak.tts import Voicer


class _StuckTTS(FakeTTS):
    """Hangs on every segment until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def synthesize(self, text: str) -> np.ndarray:
        self.release.wait(10)
        return super().synthesize(text)


def test_a_voice_far_behind_drops_new_segments_instead_of_queueing_them_forever():
    tts = _StuckTTS()
    v = Voicer(tts)
    try:
        v.say("phrase 0")
        deadline = time.monotonic() + 5
        while v._todo.qsize() and time.monotonic() < deadline:  # the voice took it and hangs on it
            time.sleep(0.01)
        t0 = time.perf_counter()
        for i in range(1, 200):
            v.say(f"phrase {i}")
        assert time.perf_counter() - t0 < 0.5, "say() must never wait for the voice"
        # one segment is being synthesized, MAX_WAITING wait, the rest were dropped and counted
        assert v.dropped == 200 - 1 - Voicer.MAX_WAITING
        tts.release.set()
        deadline = time.monotonic() + 10
        while v.synthesizing and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not v.synthesizing, "the pending count drains: dropped segments are not counted as pending"
        assert tts.texts == [f"phrase {i}" for i in range(1 + Voicer.MAX_WAITING)]
    finally:
        tts.release.set()
        v.close()


def test_oracle_events_beyond_the_bound_are_dropped_and_counted():
    sess = Session(SessionConfig(mode="tandem", frame_vad=False), FakeListener(), None, front_end=FakeFrontEnd())
    for i in range(Session.MAX_ORACLE_EVENTS + 100):
        sess._emit_oracle("append", f"w{i} ")
    assert len(sess._oracle_events) == Session.MAX_ORACLE_EVENTS
    assert sess.oracle_events_dropped == 100
    assert sess._oracle_events[0] == ("append", "w0 "), "the oldest (already accepted) events are kept"
