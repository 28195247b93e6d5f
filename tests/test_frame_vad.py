"""The voice activity the front-end hears is measured on the frame it steps with, not reported later."""
import asyncio

import numpy as np

from fakes import FakeFrontEnd, FakeListener
from tandem.audio.frames import frames_of
from tandem.listener.frame_vad import FrameVoiceMeter, SileroPool
from tandem.turn.session import Session, SessionConfig


def loud_span(x: np.ndarray, rate: int = 24000) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(x) > 0.02)
    return loud[0] / rate, loud[-1] / rate


def meter_probs(frames: np.ndarray, meter: FrameVoiceMeter) -> list[float]:
    return [meter.feed(f) for f in frames]


def test_the_meter_hears_the_question_and_its_end_within_a_quarter_second(spoken_question):
    frames = frames_of(spoken_question)
    probs = meter_probs(frames, FrameVoiceMeter(SileroPool()))
    start, end = loud_span(spoken_question)
    speaking = [i for i, p in enumerate(probs) if p > 0.5]
    assert speaking, "the question is heard as voice"
    assert all(p <= 0.5 for p in probs[: int(start / 0.08) - 1]), "the lead-in silence is not voice"
    first_quiet = next(i for i in range(int(end / 0.08), len(probs)) if probs[i] <= 0.5)
    # frame i covers audio up to (i + 1) * 80 ms: Silero's own hangover, never a reporting lag of frames
    assert (first_quiet + 1) * 0.08 - end < 0.25
    assert all(p <= 0.5 for p in probs[first_quiet + 3:]), "the tail is quiet"


def test_a_meter_from_the_pool_is_a_fresh_stream(spoken_question):
    pool = SileroPool()
    frames = frames_of(spoken_question)[:40]
    first = FrameVoiceMeter(pool)
    a = meter_probs(frames, first)
    first.close()
    first.close()  # idempotent
    assert pool.spare == 1
    second = FrameVoiceMeter(pool)
    assert pool.spare == 0, "the instance given back is taken again, not rebuilt"
    assert meter_probs(frames, second) == a, "reset: nothing of the last session's stream is left"


def test_the_session_steps_with_the_voice_activity_of_the_frame_it_just_received(spoken_question):
    """A Listener that reports voice all along (as a late report would) is not what the front-end hears:
    each step gets the meter's value for the very frame it steps with."""
    frames = frames_of(spoken_question)
    fe = FakeFrontEnd()
    sess = Session(SessionConfig(mode="frontend", pace="fast"), FakeListener(in_speech_until=99.0), None,
                   front_end=fe)
    asyncio.run(sess.run(frames))
    expected = meter_probs(frames, FrameVoiceMeter(SileroPool()))
    heard = [u.vad_prob for u in fe.frames]
    assert np.allclose(heard, expected[: len(heard)], atol=1e-6)
    assert min(heard) < 0.1 and max(heard) > 0.9
    assert sess.meter is not None and sess.meter._seg is None, "closing the session gave its Silero back"


def test_without_the_meter_the_session_takes_the_listeners_report(spoken_question):
    frames = frames_of(spoken_question)[:20]
    fe = FakeFrontEnd()
    sess = Session(SessionConfig(mode="frontend", pace="fast", frame_vad=False), FakeListener(in_speech_until=99.0),
                   None, front_end=fe)
    asyncio.run(sess.run(frames))
    assert sess.meter is None
    assert [u.vad_prob for u in fe.frames][1:] == [0.9] * (len(fe.frames) - 1)


def test_a_warmed_pool_holds_a_spare_that_has_run_and_hears_as_a_fresh_one(spoken_question):
    pool = SileroPool()
    pool.warm()
    assert pool.spare == 1
    frames = frames_of(spoken_question)[:40]
    warmed = meter_probs(frames, FrameVoiceMeter(pool))
    assert pool.spare == 0, "the session takes the warmed instance"
    assert warmed == meter_probs(frames, FrameVoiceMeter(SileroPool())), "the warm-up left nothing in its stream"


def test_a_filled_pool_holds_one_spare_per_admitted_session_and_builds_none_at_connect():
    pool = SileroPool()
    pool.warm()
    pool.fill(4)
    assert pool.spare == 4, "fill tops the pool up to the count, counting the warmed one"
    meters = [FrameVoiceMeter(pool) for _ in range(4)]
    assert pool.spare == 0
    pool.ensure_spare()
    assert pool.spare == 1, "a connect beyond the filled count still gets one, built then"
    for m in meters:
        m.close()
    assert pool.spare == 5, "closed meters go back to the pool"
    pool.fill(2)
    assert pool.spare == 5, "filling never shrinks or over-builds"
