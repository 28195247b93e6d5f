"""Helpers for the server tests (a per-stream fake Listener, an in-process server on loopback),
and unit tests of the server's small parts."""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, AsyncIterator

import numpy as np
import pytest
from aiohttp import web

from fakes import FakeFrontEnd, FakeLLMBehaviour, FakeOpenAIServer, FakeTTS
from tandem.audio.frames import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from tandem.llm.client import ChatClient, LLMConfig
from tandem.server import protocol as proto
from tandem.server.app import ServerConfig, make_app
from tandem.server.connection import InputBuffer
from tandem.server.shared import PerSessionFrontEnds, SerializedTTS, SharedLLM
from tandem.server.shared import Backend
from tandem.server.ticker import Hub, HubConfig
from tandem.turn.session import SessionConfig

QUESTION_TEXT = "what is the capital of France"


class EnergyListener:
    """A Listener fake that really listens, per stream: loud audio is speech; 0.4 s of quiet after
    it ends the turn with a final transcript (always QUESTION_TEXT)."""

    def __init__(self, text: str = QUESTION_TEXT) -> None:
        self.text = text
        self.callbacks: dict[str, Any] = {}
        self.state: dict[str, dict[str, float]] = {}
        self.opened = 0
        self.closed = 0

    def open(self, sid: str, cb) -> None:  # noqa: ANN001
        self.callbacks[sid] = cb
        self.state[sid] = {"t": 0.0, "start": -1.0, "last_voiced": -1.0}
        self.opened += 1

    def set_context(self, sid: str, text: str) -> None:  # noqa: ARG002 - this fake hears no words
        pass

    def feed(self, sid: str, frame: np.ndarray) -> None:
        cb, st = self.callbacks.get(sid), self.state.get(sid)
        if cb is None:
            return
        st["t"] += len(frame) / SAMPLE_RATE
        voiced = float(np.sqrt(np.mean(np.square(frame)))) > 0.02
        if voiced:
            if st["start"] < 0:
                st["start"] = st["t"]
                cb({"sid": sid, "kind": "vad_start", "audio_s": round(st["t"], 3)})
            st["last_voiced"] = st["t"]
        elif st["start"] >= 0 and st["t"] - st["last_voiced"] >= 0.4:
            end = st["last_voiced"]
            cb({"sid": sid, "kind": "vad_end", "audio_s": round(end, 3), "speech_s": round(end - st["start"], 3)})
            cb({"sid": sid, "kind": "final", "text": self.text, "audio_start_s": st["start"], "audio_s": round(end, 3)})
            st["start"] = -1.0
        in_speech = st["start"] >= 0
        cb({"sid": sid, "kind": "progress", "audio_s": st["t"], "vad_prob": 0.9 if in_speech else 0.0,
            "in_speech": in_speech, "busy": False})

    def close(self, sid: str) -> None:
        if self.callbacks.pop(sid, None) is not None:
            self.closed += 1
        self.state.pop(sid, None)

    @property
    def streams(self) -> int:
        return len(self.callbacks)


def tone(seconds: float, amp: float = 0.3, hz: float = 200.0) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (amp * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def question(lead_s: float = 0.2, speech_s: float = 0.8, tail_s: float = 1.2) -> np.ndarray:
    return np.concatenate([np.zeros(int(lead_s * SAMPLE_RATE), np.float32), tone(speech_s),
                           np.zeros(int(tail_s * SAMPLE_RATE), np.float32)])


@contextlib.asynccontextmanager
async def fake_server(mode: str = "tandem", max_sessions: int = 4, limits: proto.Limits = proto.Limits(),
                      token: str | None = None, record_dir=None, allow_origins: tuple[str, ...] = (),  # noqa: ANN001
                      llm_tokens: list[str] | None = None, llm_continues: bool = False,
                      llm_requests: list | None = None,  # filled with what the fake LLM is asked
                      llm_slots: int = 0,
                      allow_hosts: tuple[str, ...] = (), knowledge=None,  # noqa: ANN001 - a KnowledgeBase
                      ) -> AsyncIterator[tuple[str, Hub, EnergyListener]]:
    """An in-process server on 127.0.0.1 with fakes behind it: the energy Listener, the fake
    OpenAI server, FakeFrontEnd (echoes oracle words with a tone) and FakeTTS."""
    behaviour = FakeLLMBehaviour(**({"tokens": llm_tokens} if llm_tokens else {}), continues=llm_continues)
    with FakeOpenAIServer(behaviour) as llm_srv:
        if llm_requests is not None:
            llm_srv.requests = llm_requests
        listener = EnergyListener()
        llm = SharedLLM(ChatClient(LLMConfig(url=llm_srv.url, model="m", prefill=llm_continues,
                                                slots=llm_slots)))
        provider = PerSessionFrontEnds(lambda tts: FakeFrontEnd(), name="fake") if mode != "cascade" else None
        backend = Backend(listener, llm, SerializedTTS(FakeTTS()), provider, knowledge=knowledge)
        hub = Hub(backend, HubConfig(session=SessionConfig(mode=mode), max_sessions=max_sessions, limits=limits,
                                     record_dir=record_dir))
        runner = web.AppRunner(make_app(hub, ServerConfig(token=token, allow_origins=allow_origins, allow_hosts=allow_hosts)),
                               shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}", hub, listener
        finally:
            await runner.cleanup()
            await hub.aclose()
            await llm.aclose()


# -- unit tests of the small parts -------------------------------------------------------------------
def test_input_buffer_pads_underruns_with_silence_and_drops_the_oldest_beyond_its_limit():
    buf = InputBuffer(max_samples=3 * FRAME_SAMPLES)
    assert not buf.take().any() and buf.underruns == 0, "silence before the client speaks is not an underrun"
    buf.push(np.ones(FRAME_SAMPLES // 2, np.float32))
    assert not buf.take().any() and buf.underruns == 0, "half a frame: not started yet"
    buf.push(np.ones(FRAME_SAMPLES, np.float32))
    assert buf.take().all()
    frame = buf.take()  # the client is late: half a frame is there
    assert frame[: FRAME_SAMPLES // 2].all() and not frame[FRAME_SAMPLES // 2:].any()
    assert buf.underruns == 0, "counted once the late audio comes"
    buf.push(np.arange(5 * FRAME_SAMPLES, dtype=np.float32))
    assert buf.underruns == 1 and list(buf.underrun_takes) == [1]
    assert buf.size == 3 * FRAME_SAMPLES and buf.dropped_samples == 2 * FRAME_SAMPLES
    assert buf.take()[0] == 2 * FRAME_SAMPLES, "the newest audio is kept"


def test_a_client_that_stops_sending_makes_no_underruns():
    buf = InputBuffer(max_samples=10 * FRAME_SAMPLES)
    buf.push(np.ones(2 * FRAME_SAMPLES, np.float32))
    for _ in range(6):
        buf.take()
    assert buf.underruns == 0


def test_input_buffer_skips_a_pause_to_end_a_standing_lag_but_never_speech():
    keep = FRAME_SAMPLES // 2
    buf = InputBuffer(max_samples=20 * FRAME_SAMPLES, keep_samples=keep, window=5)
    speech = np.full(FRAME_SAMPLES, 0.3, np.float32)
    word_gap = speech.copy()
    word_gap[:FRAME_SAMPLES * 3 // 4] = 0.0  # 60 ms of quiet inside speech: a stop consonant's closure
    pause = np.zeros(FRAME_SAMPLES, np.float32)
    for _ in range(4):  # a burst: four frames of speech arrive at once, then one per tick
        buf.push(speech)
    heard = []
    for k in range(10):  # the user keeps talking: nothing may be skipped, the lag stands
        buf.push(word_gap if k % 2 else speech)
        heard.append(buf.take())
    assert buf.skipped_samples == 0 and sum(int((f == 0.3).sum()) for f in heard) >= 7 * FRAME_SAMPLES
    assert buf.lag_ms() >= 3 * FRAME_S * 1e3 - 1
    for _ in range(12):  # a pause: the lag is skipped while it is quiet, down to what is kept
        buf.push(pause)
        buf.take()
    assert 0 < buf.skipped_samples <= 4 * FRAME_SAMPLES - keep
    assert buf.size <= keep + FRAME_SAMPLES + InputBuffer.PAUSE_LEFT, "the standing lag is gone"
    buf.push(speech)
    buf.push(speech)
    assert buf.take().max() == 0.3 or buf.take().max() == 0.3, "speech after the pause is heard within two frames"
    assert buf.dropped_samples == 0 and buf.underruns == 0


def test_input_buffer_keeps_a_lag_when_told_to():
    buf = InputBuffer(max_samples=20 * FRAME_SAMPLES, keep_samples=-1, window=5)
    for _ in range(4):
        buf.push(np.zeros(FRAME_SAMPLES, np.float32))
    for _ in range(10):
        buf.push(np.zeros(FRAME_SAMPLES, np.float32))
        buf.take()
    assert buf.skipped_samples == 0 and buf.size == 4 * FRAME_SAMPLES


def test_token_bucket_allows_bursts_then_the_sustained_rate():
    b = proto.TokenBucket(rate=10, burst=5, now=0.0)
    assert all(b.take(1, 0.0) for _ in range(5))
    assert not b.take(1, 0.0)
    assert b.take(1, 0.1) and not b.take(1, 0.1)
    assert b.take(5, 10.0)


def test_messages_are_one_kind_byte_and_a_payload():
    assert proto.handshake() == b"\x00"
    assert proto.audio(b"OggS") == b"\x01OggS"
    assert proto.text(" é") == b"\x02 \xc3\xa9"
    assert proto.error("bad") == b"\x05bad"
    assert proto.event({"type": "x"})[0] == proto.METADATA


def wait_until(pred, timeout_s: float = 5.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_turn_onset_counts_the_first_audible_frame_after_the_end_of_speech_even_when_the_reply_started_before():
    from tandem.record.metrics import TurnOnsets

    on = TurnOnsets()
    on.speech_start()
    # the front-end takes its turn 0.3 s after the speech ended, before the 400 ms endpoint event arrives
    assert on.audible(2.3) is None
    assert on.speech_end(2.0) == (2.0, 0.3)
    assert on.audible(2.4) is None  # later frames of the same reply are not a new turn
    # next turn: the reply was already under way when the user stopped (it talked over the end, or
    # resumed after a cut less than 0.5 s of silence later): the frame at the end of speech is the onset
    on.speech_start()
    for t in (5.04, 5.12, 5.20):
        assert on.audible(t) is None
    assert on.speech_end(5.1) == (5.1, 0.02)
    # a turn the user follows with more speech before any reply has no onset
    on.speech_start()
    assert on.speech_end(7.0) is None
    on.speech_start()
    assert on.speech_end(9.0) is None
    assert on.audible(9.5) == (9.0, 0.5)


def test_turn_latency_rows_come_from_the_sessions_onsets_with_the_final_transcripts_delay():
    from tandem.server.connection import _TurnLatency

    lat = _TurnLatency()
    lat.on({"kind": "vad_start", "t": 0.5, "audio_s": 0.4})
    assert lat.on({"kind": "vad_end", "t": 2.5, "audio_s": 2.0}) is None
    assert lat.on({"kind": "turn_onset", "t": 2.5, "speech_end_s": 2.0, "onset_s": 0.3}) == {
        "type": "latency", "speech_end_s": 2.0, "onset_s": 0.3}
    # next turn, answered after its final transcript
    lat.on({"kind": "vad_start", "t": 6.0, "audio_s": 5.9})
    lat.on({"kind": "vad_end", "t": 8.0, "audio_s": 7.5})
    lat.on({"kind": "final", "t": 8.1, "text": "x"})
    assert lat.on({"kind": "turn_onset", "t": 8.4, "speech_end_s": 7.5, "onset_s": 0.9}) == {
        "type": "latency", "speech_end_s": 7.5, "onset_s": 0.9, "final_s": 0.6}


# -- the recorder: disk I/O off the ticker -----------------------------------------------------------
def _record_frames(rec, timeline, frames: range) -> float:  # noqa: ANN001
    """Feed frames k (user k+1 hundredths, step output -(k+1) hundredths); the slowest frame() in s."""
    worst = 0.0
    for k in frames:
        timeline.add("partial", text=f"w{k}")
        timeline.add_frame(t=(k + 1) * 0.08, late_ms=0.0, step_ms=1.0, oracle_token=0, text="")
        t0 = time.perf_counter()
        rec.frame(np.full(FRAME_SAMPLES, (k + 1) / 100, np.float32), np.full(FRAME_SAMPLES, -(k + 1) / 100, np.float32),
                  timeline)
        worst = max(worst, time.perf_counter() - t0)
    return worst


def _jsonl(rec) -> list[dict[str, Any]]:  # noqa: ANN001
    import json

    return [json.loads(x) for x in rec.jsonl_path.read_text().splitlines()]


def test_recorder_frame_does_not_wait_for_a_slow_disk_and_close_writes_everything(tmp_path, monkeypatch):
    import soundfile as sf

    from tandem.server.record import Recorder
    from tandem.record.timeline import Timeline

    delay = 0.2
    real_write = sf.SoundFile.write

    def slow_write(self, data):  # noqa: ANN001
        time.sleep(delay)
        return real_write(self, data)

    monkeypatch.setattr(sf.SoundFile, "write", slow_write)
    timeline = Timeline(clock=lambda: 0.0)
    rec = Recorder(tmp_path, "slow")
    n = 15  # crosses a flush (every 12 frames)
    worst = _record_frames(rec, timeline, range(n))
    assert worst < delay / 4, f"frame() took {worst * 1e3:.0f} ms: it waited for a {delay * 1e3:.0f} ms write"
    t0 = time.perf_counter()
    rec.close(timeline)
    assert time.perf_counter() - t0 > delay, "close waits for the queued writes"
    data, rate = sf.read(str(rec.wav_path), dtype="float32")
    assert rate == SAMPLE_RATE and data.shape == (n * FRAME_SAMPLES, 2)
    for k in (0, 7, n - 1):  # user frame k on the left; step k - 1's output on the right
        assert abs(data[k * FRAME_SAMPLES, 0] - (k + 1) / 100) < 1e-3
        assert abs(data[k * FRAME_SAMPLES, 1] + k / 100) < 1e-3
    rows = _jsonl(rec)
    assert [r["frame"] for r in rows if "frame" in r] == list(range(n))
    assert [r["event"]["text"] for r in rows if "event" in r] == [f"w{k}" for k in range(n)]
    assert rec.json_path.exists() and rec.dropped_frames == 0


def test_a_full_recording_queue_drops_frames_as_silence_and_never_blocks(tmp_path, monkeypatch):
    import threading

    import soundfile as sf

    from tandem.server.record import Recorder
    from tandem.record.timeline import Timeline

    stuck = threading.Event()
    real_write = sf.SoundFile.write

    def stuck_write(self, data):  # noqa: ANN001
        stuck.wait(10)
        return real_write(self, data)

    monkeypatch.setattr(sf.SoundFile, "write", stuck_write)
    timeline = Timeline(clock=lambda: 0.0)
    rec = Recorder(tmp_path, "stuck", max_queued=4)
    n = 20
    worst = _record_frames(rec, timeline, range(n))
    assert worst < 0.05, f"frame() took {worst * 1e3:.0f} ms with the queue full"
    assert n - 5 <= rec.dropped_frames <= n - 4 and rec.dropped_flushes == 1
    stuck.set()
    rec.close(timeline)
    data, _ = sf.read(str(rec.wav_path), dtype="float32")
    assert data.shape == (n * FRAME_SAMPLES, 2), "dropped frames are written as silence: the wav stays aligned"
    user = data[::FRAME_SAMPLES, 0]
    kept = np.flatnonzero(user)
    # which frames got in depends on when the writer took its first one (before or after the queue
    # filled); each kept frame sits at its own place, the first four always got in, the rest is silence
    assert len(kept) == n - rec.dropped_frames and set(range(4)) <= set(kept.tolist())
    assert np.allclose(user[kept], (kept + 1) / 100, atol=1e-3)
    rows = _jsonl(rec)  # the dropped flush's rows went with the last one
    assert [r["frame"] for r in rows if "frame" in r] == list(range(n))


def test_deprioritize_lowers_every_thread_of_a_process_not_only_its_first():
    import os
    import subprocess
    import sys

    import psutil

    from tandem.runtime.realtime import deprioritize

    code = ("import threading, time\n"
            "for _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
            "print('ready', flush=True); time.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        deprioritize([p.pid], 7)
        tids = [t.id for t in psutil.Process(p.pid).threads()]
        assert len(tids) == 4
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in tids} == {7}, "workers started before keep nice 0 otherwise"
        deprioritize([p.pid], 3)  # never raised back
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in tids} == {7}
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroup scheduling on this kernel")
def test_deprioritize_lowers_the_cpu_group_of_a_process_in_a_session_of_its_own():
    import subprocess

    from tandem.runtime.realtime import autogroup_nice as group_nice
    from tandem.runtime.realtime import deprioritize

    own = subprocess.Popen(["sleep", "30"], start_new_session=True)
    ours = subprocess.Popen(["sleep", "30"])
    try:
        before = group_nice(os.getpid())  # None in the default group (CI's container): left so as well
        deprioritize([own.pid, ours.pid], 9)
        assert group_nice(own.pid) == 9
        assert group_nice(os.getpid()) == group_nice(ours.pid) == before, "our own group is left alone"
        assert os.getpriority(os.PRIO_PROCESS, ours.pid) == 9
    finally:
        for p in (own, ours):
            p.kill()
            p.wait()


class FakeStreamingClient:
    """A fake ChatClient: each request takes 50 ms for its one delta; the order in which requests
    began is recorded."""

    config = LLMConfig(url="http://127.0.0.1:9", model="m")

    def __init__(self) -> None:
        self.order: list[str] = []

    async def stream(self, messages, max_tokens=None, slot=None):  # noqa: ANN001
        import asyncio
        self.order.append(messages[-1]["content"])
        await asyncio.sleep(0.05)
        yield "x"

    async def aclose(self) -> None:
        pass


def _msgs(session: str, words: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "S"}, {"role": "user", "content": f"dialogue of {session}"},
            {"role": "user", "content": f"{session}: {words}"}]


async def _drain(llm: SharedLLM, messages) -> None:  # noqa: ANN001
    async for _ in llm.stream(messages):
        pass


@pytest.mark.parametrize("affinity_wait_s, order", [
    (5.0, ["A: what is", "A: what is the", "B: how many"]),  # going on from the last prompt: first
    (0.0, ["A: what is", "B: how many", "A: what is the"]),  # the oldest has waited long enough: arrival order
])
async def test_shared_llm_lets_a_request_that_goes_on_from_the_last_prompt_go_first(affinity_wait_s, order):
    import asyncio
    fake = FakeStreamingClient()
    llm = SharedLLM(fake, concurrency=1, affinity_wait_s=affinity_wait_s)  # type: ignore[arg-type]
    first = asyncio.create_task(_drain(llm, _msgs("A", "what is")))
    await asyncio.sleep(0.01)
    other = asyncio.create_task(_drain(llm, _msgs("B", "how many")))
    await asyncio.sleep(0.01)
    same = asyncio.create_task(_drain(llm, _msgs("A", "what is the")))
    await asyncio.gather(first, other, same)
    assert fake.order == order
    assert llm.stats["out_of_turn"] == (1 if affinity_wait_s else 0) and llm.load() == 0


async def test_a_cancelled_waiter_leaves_the_queue_and_the_slot_is_not_lost():
    import asyncio
    fake = FakeStreamingClient()
    llm = SharedLLM(fake, concurrency=1)  # type: ignore[arg-type]
    first = asyncio.create_task(_drain(llm, _msgs("A", "one")))
    await asyncio.sleep(0.01)
    gone = asyncio.create_task(_drain(llm, _msgs("B", "two")))
    await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await _drain(llm, _msgs("C", "three"))
    assert fake.order == ["A: one", "C: three"] and llm.load() == 0


async def test_a_session_that_cancels_its_stream_for_a_newer_partial_keeps_the_llm():
    """The scheduler cancels its stream and starts the newer one in the same turn of the loop: the
    newer one, going on from the same dialogue, is served before another session's request."""
    import asyncio
    fake = FakeStreamingClient()
    llm = SharedLLM(fake, concurrency=1, affinity_wait_s=5.0)  # type: ignore[arg-type]
    old = asyncio.create_task(_drain(llm, _msgs("A", "what is")))
    await asyncio.sleep(0.01)
    other = asyncio.create_task(_drain(llm, _msgs("B", "how many")))
    await asyncio.sleep(0.01)
    old.cancel()
    newer = asyncio.create_task(_drain(llm, _msgs("A", "what is the")))
    await asyncio.gather(other, newer, return_exceptions=True)
    assert fake.order == ["A: what is", "A: what is the", "B: how many"]


async def test_each_session_asks_the_llm_in_a_server_slot_of_its_own_while_there_is_one():
    """llama-server keeps each slot's last prompt evaluated: a session pinned to its own slot (id_slot)
    goes on from its own dialogue, and never takes the slot of another session's."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Paris."])) as srv:
        llm = SharedLLM(ChatClient(LLMConfig(url=srv.url, model="m", slots=2)), concurrency=2)
        a, b, c = llm.for_session(), llm.for_session(), llm.for_session()
        assert (a.slot, b.slot, c.slot) == (0, 1, None), "no slot left: the server picks one"
        for s in (a, b, c):
            assert [d async for d in s.stream(_msgs(str(s.slot), "what"))] == ["Paris."]
        assert [r["body"].get("id_slot") for r in srv.requests] == [0, 1, None]
        a.close()
        a.close()  # twice: given back once
        d, e = llm.for_session(), llm.for_session()
        assert (d.slot, e.slot) == (0, None), "a slot given back is a new session's"
        assert d.config is llm.config and d.load() == 0
        await llm.aclose()


async def test_without_slots_no_request_names_one():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Paris."])) as srv:
        llm = SharedLLM(ChatClient(LLMConfig(url=srv.url, model="m")))  # OpenAI's API: slots unknown
        s = llm.for_session()
        assert s.slot is None
        assert [d async for d in s.stream(_msgs("A", "what"))] == ["Paris."]
        assert "id_slot" not in srv.requests[-1]["body"]
        await llm.aclose()


def test_autogroup_nice_reads_the_group_and_is_none_in_the_default_group(monkeypatch, tmp_path):
    """The default group's /proc/PID/autogroup is empty (CI's container runs in it): no niceness to read,
    and none written."""
    import builtins

    from tandem.runtime import realtime

    contents = {"42": "/autogroup-604 nice 5\n", "43": ""}
    real_open = builtins.open

    def fake_proc_open(path, mode="r", *a, **k):  # noqa: ANN001
        pid = str(path).split("/")[2] if str(path).startswith("/proc/") else None
        if pid in contents:
            if "w" in mode:
                raise AssertionError("the default group is never written")
            target = tmp_path / pid
            target.write_text(contents[pid])
            return real_open(target, mode, *a, **k)
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(realtime, "open", fake_proc_open, raising=False)
    assert realtime.autogroup_nice(42) == 5
    assert realtime.autogroup_nice(43) is None
    assert realtime.autogroup_nice(2**22 + 7) is None  # no such process
    monkeypatch.setattr(realtime.os, "getsid", lambda pid: pid)  # every pid a session of its own
    realtime._nice_own_session(43, 9)
