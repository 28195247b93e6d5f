"""The real Listener and voice processes under the supervisor: killed, hung or behind, they come back
or shed load, and the streams using them go on."""
from __future__ import annotations

import os
import queue
import signal
import time

import numpy as np
import pytest

from tandem.audio.frames import FRAME_SAMPLES, frames_of
from tandem.runtime.children import Supervisor
from tandem.listener.process import ListenerProcess
from tandem.server.tts_process import ProcessTTS


def _wait(cond, timeout_s: float) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _finals(got: "queue.Queue[dict]", timeout_s: float) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not out:
        try:
            msg = got.get(timeout=0.2)
        except queue.Empty:
            continue
        if msg.get("kind") == "final":
            out.append(msg)
    return out


def test_a_killed_listener_is_restarted_and_its_streams_go_on_on_their_own_clock(spoken_question):
    got: "queue.Queue[dict]" = queue.Queue()
    sup = Supervisor(poll_s=0.05)
    with ListenerProcess() as lp:
        sup.watch(lp)
        lp.open("s1", got.put)
        silence = np.zeros(FRAME_SAMPLES, np.float32)
        for _ in range(25):  # 2 s of the stream before the fault
            lp.feed("s1", silence)
        old = lp.pid
        os.kill(old, signal.SIGKILL)
        _wait(lambda: sup.status()["Listener"]["restarts"] == 1, 60)
        assert lp.pid != old and lp.alive()
        for f in frames_of(spoken_question):
            lp.feed("s1", f)
            time.sleep(0.005)
        finals = _finals(got, 30)
        sup.close()
    assert finals and "capital of france" in finals[0]["text"].lower()
    # the question began 0.5 s into its audio, fed after 2 s of silence: the restarted Listener
    # times it on the stream's own clock, not from zero
    assert 2.3 < finals[0]["audio_start_s"] < 3.0, finals[0]


def test_feeding_a_listener_that_stopped_taking_audio_drops_frames_instead_of_blocking():
    with ListenerProcess(feed_limit=10) as lp:
        lp.open("s1", lambda m: None)
        time.sleep(0.3)  # let the open reach the worker before it is frozen
        os.kill(lp.pid, signal.SIGSTOP)
        try:
            frame = np.zeros(FRAME_SAMPLES, np.float32)
            t0 = time.perf_counter()
            for _ in range(100):
                lp.feed("s1", frame)
            took = time.perf_counter() - t0
        finally:
            os.kill(lp.pid, signal.SIGCONT)
        assert lp.dropped_frames >= 85
        assert took < 1.0, f"feeding took {took:.2f} s"


def test_a_hung_voice_is_killed_within_its_timeout_and_restarted_and_then_speaks_again():
    sup = Supervisor(poll_s=0.05)
    with ProcessTTS(timeout_s=1.0) as voice:
        sup.watch(voice)
        assert len(voice.synthesize("Hello there.")) > 0
        os.kill(voice.pid, signal.SIGSTOP)  # hung: alive but silent
        t0 = time.perf_counter()
        with pytest.raises(TimeoutError):
            voice.synthesize("Are you there?")
        assert time.perf_counter() - t0 < 2.0
        _wait(lambda: sup.status()["voice"]["restarts"] == 1, 60)
        assert len(voice.synthesize("I am back.")) > 0
        assert voice.timeouts == 1
        sup.close()


def test_a_listener_that_cannot_load_stops_the_start_with_the_cause():
    from tandem.runtime.errors import BackendUnavailable
    from tandem.listener.worker import ListenerConfig

    lp = ListenerProcess(ListenerConfig(whisper_model_dir="/nonexistent/whisper"))
    with pytest.raises(BackendUnavailable, match="Listener could not load Whisper"):
        lp.start()
    assert not lp.alive()
