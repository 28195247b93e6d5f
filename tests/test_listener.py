"""The real Listener parts: Silero VAD, Whisper with the short encoder context, and the process."""
import queue
import time

import numpy as np
import pytest

from tandem.audio.frames import FRAME_SAMPLES, frames_of, resample
from tandem.listener.process import ListenerProcess
from tandem.listener.worker import ListenerConfig
from tandem.listener.vad import VadConfig, VadSegmenter
from tandem.listener.whisper import ShortContextWhisper


def speech_bounds(x: np.ndarray, rate: int) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(x) > 0.02)
    return loud[0] / rate, loud[-1] / rate


def test_vad_finds_one_segment_and_its_end(spoken_question):
    x16 = resample(spoken_question, 24000, 16000)
    seg = VadSegmenter()
    events = []
    for i in range(0, len(x16), 1280):
        events += seg.feed(x16[i:i + 1280])[1]
    kinds = [e.kind for e in events]
    assert kinds == ["start", "end"]
    s, e = speech_bounds(x16, 16000)
    assert abs(events[0].sample / 16000 - s) < 0.25
    assert abs(events[1].sample / 16000 - e) < 0.25


def test_a_short_pause_inside_a_turn_does_not_end_it(spoken_question):
    x = resample(spoken_question, 24000, 16000)
    s, e = speech_bounds(x, 16000)
    mid = int((s + e) / 2 * 16000)
    # 0.3 s of silence inside the question, below the 0.4 s endpoint rule
    y = np.concatenate([x[:mid], np.zeros(int(0.3 * 16000), np.float32), x[mid:]])
    seg = VadSegmenter(VadConfig(min_silence_s=0.4))
    events = seg.feed(y)[1]
    assert [ev.kind for ev in events] == ["start", "end"]


def test_short_context_whisper_transcribes_and_is_cheap(spoken_question):
    w = ShortContextWhisper()
    x16 = resample(spoken_question, 24000, 16000)
    w.transcribe(x16[:16000])
    tr = w.transcribe(x16)
    full = w.transcribe(x16, full_context=True)
    assert "capital of france" in tr.text.lower()
    assert tr.text.lower().strip(" .?") == full.text.lower().strip(" .?")
    assert tr.decode_ms < full.decode_ms, "the short context must be cheaper than 30 s of padding"


def test_listener_process_gives_partials_then_a_final(spoken_question):
    got: "queue.Queue[dict]" = queue.Queue()
    with ListenerProcess() as lp:
        lp.open("s1", got.put)
        for f in frames_of(spoken_question):
            lp.feed("s1", f)
            time.sleep(0.01)  # faster than real time, slow enough for partials to be decoded
        events = []
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                ev = got.get(timeout=0.5)
            except queue.Empty:
                continue
            events.append(ev)
            if ev["kind"] == "final":
                break
        lp.close("s1")
    kinds = [e["kind"] for e in events if e["kind"] != "progress"]
    assert kinds[0] == "vad_start"
    assert "partial" in kinds
    # the VAD runs beside the decoder: a partial decoded as the speech ended may come after vad_end,
    # never after the final (one decode at a time, the final queued after it)
    assert kinds[-1] == "final" and "vad_end" in kinds and kinds.count("final") == 1
    final = events[-1]
    assert "capital of france" in final["text"].lower()
    assert final["audio_s"] <= len(spoken_question) / 24000
    progress = [e for e in events if e["kind"] == "progress"]
    assert progress and all(0.0 <= p["vad_prob"] <= 1.0 for p in progress)


def test_a_decode_keeps_one_core_busy(spoken_question):
    """No thread spins beside the decode: numpy's OpenBLAS threads (tandem/__init__.py) spun after each of
    Whisper's feature products and burned more CPU than the decode itself, a core the LLM and the other
    decodes wanted."""
    import psutil

    def cpu_by_thread(pid: int) -> dict[int, float]:
        # not the main thread: it is the feed loop, which resamples and runs the VAD on every frame (0.10 s here
        # on a host whose decode took 0.14 s), work of its own and not a thread spinning beside the decode
        return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads() if t.id != pid}

    got: "queue.Queue[dict]" = queue.Queue()
    with ListenerProcess(ListenerConfig(decode_lanes=1, whisper_threads=1)) as lp:
        loaded = cpu_by_thread(lp._proc.pid)  # Whisper loaded and warmed up on the main thread
        lp.open("s1", got.put)
        for f in frames_of(spoken_question):
            lp.feed("s1", f)
            time.sleep(0.01)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if got.get(timeout=0.5)["kind"] == "final":
                    break
            except queue.Empty:
                continue
        cpu = sorted((t - loaded.get(tid, 0.0) for tid, t in cpu_by_thread(lp._proc.pid).items()), reverse=True)
        lp.close("s1")
    assert cpu[0] > 0.1, "the decodes ran"
    assert cpu[1] < 0.5 * cpu[0], f"a second thread worked beside the decode: {cpu[:3]}"


def test_listener_isolates_streams_and_survives_bad_messages(spoken_question):
    a: "queue.Queue[dict]" = queue.Queue()
    b: "queue.Queue[dict]" = queue.Queue()
    with ListenerProcess() as lp:
        lp.open("a", a.put)
        lp.open("b", b.put)
        lp._inbox.put(("audio", "a", "not audio"))  # a malformed message must not kill the worker
        silence = np.zeros(FRAME_SAMPLES, np.float32)
        for f in frames_of(spoken_question):
            lp.feed("a", f)
            lp.feed("b", silence)
            time.sleep(0.005)
        deadline = time.time() + 20
        finals = []
        while time.time() < deadline and not finals:
            try:
                ev = a.get(timeout=0.5)
            except queue.Empty:
                continue
            if ev["kind"] == "final":
                finals.append(ev)
        b_events = []
        while not b.empty():
            b_events.append(b.get())
    assert finals and "france" in finals[0]["text"].lower()
    assert {e["kind"] for e in b_events} == {"progress"}, "silence on stream b must produce no speech events"


def test_whisper_loops_are_not_passed_on_as_partials():
    from tandem.listener.worker import plausible

    assert plausible("What is the capital of France?", 2.0)
    assert not plausible("What is... " + "Wh- " * 40, 0.6)


def test_a_decoding_loop_is_cut_where_the_question_starts_over():
    from tandem.listener.whisper import token_budget, without_loops

    looped = "How long is the warranty? How long is The Werenchy, Unluffin Projects? How long Is The Werenci?"
    assert without_loops(looped) == "How long is the warranty?"
    assert without_loops("who founded blue for an appliances, who founded blue from appliances...") == \
        "who founded blue for an appliances"
    kept = "How many days are there in a year? And how many in a leap year?"
    assert without_loops(kept) == kept, "two different questions are not a loop"
    assert without_loops("Yes, yes, yes, I know.") == "Yes, yes, yes, I know.", "short repeats are speech"
    assert token_budget(2.0, 96) == 22 and token_budget(60.0, 96) == 96


def test_voice_activity_is_reported_while_whisper_decodes(monkeypatch):
    """The front-end takes its turn from the Listener's voice activity: a decode must not hold it up."""
    from tandem.listener import worker

    class SlowWhisper(_FakeWhisperDecodes):  # every decode of real speech takes 0.6 s, like a long one under load
        delay_s = 0.6
        batches: list[int] = []

    class TimedQueue(queue.Queue):  # when the worker emitted each message
        def put(self, item, *a, **k):
            super().put((time.perf_counter(), item), *a, **k)

    msgs, n_frames = _worker_hears_question(monkeypatch, SlowWhisper, ["s"], worker.ListenerConfig(), TimedQueue())
    progress = [at for at, m in msgs if m.get("kind") == "progress"]
    partials = [m for _, m in msgs if m.get("kind") == "partial"]
    assert len(partials) >= 2, "decodes ran while the audio came in"
    assert len(progress) >= n_frames - 1, "every frame's voice activity was reported"
    gaps = [b - a for a, b in zip(progress, progress[1:])]
    assert max(gaps) < 0.3, f"voice activity waited {max(gaps):.2f} s behind a decode"


def test_whisper_told_the_earlier_turn_hears_a_follow_up_and_echoes_nothing_over_noise():
    """Whisper's previous-text prompt: the follow-up's words in the light of the question before, and
    over a second of hiss, where Whisper told a context repeats it, the context is not what is heard."""
    from tandem.listener.worker import echoes, transcribe_in_context
    from tandem.audio.voices import speak

    w = ShortContextWhisper()
    follow_up = resample(speak("And on a basketball team?", "flite", lead_s=0.3, tail_s=0.3), 24000, 16000)
    earlier = "How many players are on a soccer team?"
    heard = transcribe_in_context(w, [(follow_up, earlier)])[0].text.lower()
    assert "basketball team" in heard, heard
    hiss = (0.05 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32)
    told = w.transcribe(hiss, context="What is the capital of Canada?").text
    assert echoes(told, "What is the capital of Canada?"), "the case the guard is for no longer occurs: recheck it"
    assert not echoes(transcribe_in_context(w, [(hiss, "What is the capital of Canada?")])[0].text,
                      "What is the capital of Canada?")
    again = resample(speak("And of Australia?", "flite", lead_s=0.3, tail_s=0.3), 24000, 16000)
    heard_again = transcribe_in_context(w, [(again, "What is the capital of Canada? And of Australia?")])[0].text
    assert "australia" in heard_again.lower(), "a turn asked again is heard as it was, not decoded again without its context"


def test_a_stream_decodes_with_the_context_its_session_sent(spoken_question):
    """The context travels to the worker with the stream, and a restarted Listener keeps it."""
    got: "queue.Queue[dict]" = queue.Queue()
    with ListenerProcess() as lp:
        lp.open("s1", got.put)
        lp.set_context("s1", "Tell me about European capitals.")
        lp.set_context("nobody", "ignored: no such stream")
        assert lp._contexts == {"s1": "Tell me about European capitals."}
        for f in frames_of(spoken_question):
            lp.feed("s1", f)
        deadline = time.monotonic() + 30
        final = None
        while final is None and time.monotonic() < deadline:
            ev = got.get(timeout=30)
            final = ev if ev["kind"] == "final" else None
        assert final is not None and "capital of france" in final["text"].lower()
        lp.close("s1")
        assert lp._contexts == {}


def test_a_batch_of_decodes_hears_what_each_decode_alone_hears():
    """Several streams' decodes in one batch (different lengths, contexts and none): the same words."""
    from tandem.audio.voices import speak

    w = ShortContextWhisper()
    qs = ["What is the capital of France?", "How many legs does a spider have?", "And of Germany?"]
    clips = [resample(speak(q, "festival", lead_s=0.3, tail_s=0.2), 24000, 16000) for q in qs]
    items = [(clips[0], ""), (clips[1], "Tell me about insects."), (clips[2], "What is the capital of France?")]
    alone = [w.transcribe(a, context=c).text.lower().strip(" .?") for a, c in items]
    together = w.transcribe_many(items)
    assert [t.text.lower().strip(" .?") for t in together] == alone
    assert "capital of france" in alone[0] and "spider" in alone[1] and "germany" in alone[2]


def test_streams_talking_at_once_are_decoded_in_batches_one_job_a_stream(monkeypatch):
    """Two sessions speaking at the same time: their decodes share batches, never two of one stream."""
    from tandem.listener import worker

    class CountingWhisper(_FakeWhisperDecodes):  # 0.2 s a batch
        delay_s = 0.2
        batches: list[int] = []

    msgs, _ = _worker_hears_question(monkeypatch, CountingWhisper, ["a", "b"], worker.ListenerConfig(decode_batch=4),
                                     queue.Queue())
    batches = CountingWhisper.batches
    finals = [m for m in msgs if m.get("kind") == "final"]
    assert sorted(m["sid"] for m in finals) == ["a", "b"]
    assert max(batches) == 2 and set(batches) <= {1, 2}, batches
    assert all(m["batch"] in (1, 2) for m in msgs if m.get("kind") in ("partial", "final") and not m.get("reused"))


class _FakeWhisperDecodes:
    """A fake Whisper for the worker: each batch with real speech in it takes `delay_s`; batch sizes kept."""

    delay_s = 0.6
    batches: list[int] = []

    def __init__(self, *a, **k):  # noqa: ANN002, ANN003
        pass

    def transcribe(self, audio, full_context=False, context=""):  # noqa: ANN001
        return self.transcribe_many([(audio, context)], full_context)[0]

    def transcribe_many(self, items, full_context=False):  # noqa: ANN001, ARG002
        from tandem.listener import whisper

        if any(len(a) > 8000 for a, _ in items):
            type(self).batches.append(len(items))
            time.sleep(self.delay_s)
        return [whisper.Transcript("what is the tallest mountain", 0.0, self.delay_s * 1e3) for _ in items]


def _worker_hears_question(monkeypatch, fake, sids, config, outbox):  # noqa: ANN001
    """Runs the Listener worker on a thread with `fake` for Whisper, feeds examples/question.wav to every
    stream of `sids` in real time, stops it a second later; returns what it put in `outbox`, and the
    number of frames fed."""
    import threading
    from pathlib import Path

    from tandem.audio.frames import load_input
    from tandem.listener import whisper, worker

    monkeypatch.setattr(whisper, "ShortContextWhisper", fake)
    inbox = queue.Queue()
    t = threading.Thread(target=worker.run_worker, args=(inbox, outbox, config), daemon=True)
    t.start()
    first = outbox.get(timeout=10)
    assert (first[1] if isinstance(first, tuple) else first)["kind"] == "ready"
    samples = load_input(Path(__file__).resolve().parent.parent / "examples" / "question.wav").samples
    for sid in sids:
        inbox.put(("open", sid))
    t0 = time.perf_counter()
    n = len(samples) // FRAME_SAMPLES
    for k in range(n):
        while time.perf_counter() < t0 + k * 0.08:
            time.sleep(0.005)
        for sid in sids:
            inbox.put(("audio", sid, samples[k * FRAME_SAMPLES:(k + 1) * FRAME_SAMPLES]))
    time.sleep(1.0)
    inbox.put(("stop",))
    t.join(timeout=5)
    msgs = []
    while not outbox.empty():
        msgs.append(outbox.get())
    return msgs, n


def test_a_paused_stream_is_decoded_first_and_silence_alone_is_not_decoded():
    from types import SimpleNamespace

    from tandem.listener.worker import ListenerConfig, _next_jobs, _Stream

    def stream(seen, voiced_end, last_partial, silence_s):  # a stream 1 s into its turn, by its VAD's state
        vad = SimpleNamespace(samples_seen=seen, last_voiced_end=voiced_end, silence_so_far_s=lambda: silence_s)
        return _Stream(vad, None, audio=np.zeros(seen, np.float32), utt_start=0, last_partial_end=last_partial)

    talking = stream(32000, 32000, 8000, 0.0)  # the most stale
    paused = stream(32000, 28000, 16000, 0.25)  # quiet for 0.25 s, words since its last partial
    silent = stream(32000, 15000, 16000, 1.0)  # nothing voiced since its last partial
    streams = {"talking": talking, "paused": paused, "silent": silent}
    jobs = _next_jobs(streams, ListenerConfig(decode_batch=1))
    assert [j.sid for j in jobs] == ["paused"] and jobs[0].paused, "and marked as the pause's partial"
    jobs = _next_jobs(streams, ListenerConfig(decode_batch=4))
    assert [j.sid for j in jobs] == ["talking"], "the paused one was just taken; the silent one is never due"
    assert not jobs[0].paused
    just_paused = stream(32000, 30400, 28800, 0.1)  # 0.2 s since its last partial, but a pause: due at once
    assert [j.sid for j in _next_jobs({"p": just_paused}, ListenerConfig())] == ["p"]
    early = stream(480000, 480000, 472000, 0.0)  # 30 s into its session, 0.5 s since its last partial
    late = stream(32000, 32000, 16000, 0.0)  # connected later: 1 s since its last partial
    assert [j.sid for j in _next_jobs({"early": early, "late": late}, ListenerConfig())] == ["late"]
    early2 = stream(480000, 480000, 440000, 0.0)  # 2.5 s since: staler, though later in its own clock
    assert [j.sid for j in _next_jobs({"late": stream(32000, 32000, 16000, 0.0), "early": early2},
                                      ListenerConfig())] == ["early"]


def test_the_last_decode_lane_is_kept_for_what_a_user_waits_on():
    """With the other lanes decoding partials of streams still talking (`hops_free` False), only a final or
    the partial due as a user pauses is taken; a stream being decoded is never decoded twice at once."""
    from types import SimpleNamespace

    from tandem.listener.worker import ListenerConfig, _next_jobs, _Stream

    def stream(seen, voiced_end, last_partial, silence_s, **kw):
        vad = SimpleNamespace(samples_seen=seen, last_voiced_end=voiced_end, silence_so_far_s=lambda: silence_s)
        return _Stream(vad, None, audio=np.zeros(seen, np.float32), utt_start=0, last_partial_end=last_partial, **kw)

    config = ListenerConfig(decode_batch=4)
    talking = {"talking": stream(32000, 32000, 8000, 0.0)}
    assert _next_jobs(talking, config, hops_free=False) == []
    hop = _next_jobs(talking, config)
    assert [j.hop for j in hop] == [True]
    assert hop[0].due_s == pytest.approx(24000 / 16000 - 0.3), "due since a hop's worth of new audio"
    paused = {"paused": stream(32000, 28000, 16000, 0.25), "talking": stream(32000, 32000, 8000, 0.0)}
    jobs = _next_jobs(paused, config, hops_free=False)
    assert [(j.sid, j.paused, j.hop) for j in jobs] == [("paused", True, False)]
    assert jobs[0].due_s == pytest.approx(0.25 - 0.1), "due since the pause was PAUSED_S long"
    ended = {"ended": stream(32000, 28000, 30000, 0.5, finals=[(0, 30000, 28000)])}
    assert [(j.sid, j.final) for j in _next_jobs(ended, config, hops_free=False)] == [("ended", True)]
    busy = {"busy": stream(32000, 28000, 16000, 0.25, decoding=True, finals=[(0, 30000, 28000)])}
    assert _next_jobs(busy, config) == [], "its decode under way on another lane goes first"


def test_a_partial_of_a_user_still_talking_waits_while_a_final_or_pause_decodes():
    """`_hops_free`: never on the last lane, and (hops_yield) not beside a final or a pause, which would
    share the cores with it; one lane decodes anything."""
    from tandem.listener.worker import ListenerConfig, _hops_free

    two = ListenerConfig(decode_lanes=2)
    assert _hops_free(two, hops=0, urgent=0)
    assert not _hops_free(two, hops=1, urgent=0), "the last lane is kept"
    assert not _hops_free(two, hops=0, urgent=1), "a pause is being decoded"
    assert _hops_free(ListenerConfig(decode_lanes=2, hops_yield=False), hops=0, urgent=1)
    assert _hops_free(ListenerConfig(decode_lanes=1), hops=0, urgent=1)


def test_a_partial_the_voice_went_on_past_is_marked_said_more():
    """`said_more`: by the time the partial is decoded the stream has voice SAID_MORE_S past its audio, so
    Whisper's closing punctuation is the cut's, not the question's end."""
    from tandem.listener import whisper
    from tandem.listener.worker import SAID_MORE_S, ListenerConfig, _decode, _Job

    class OneText:
        def transcribe_many(self, items, full_context=False):  # noqa: ANN001, ARG002
            return [whisper.Transcript("What is the capital?", 0.01, 5.0) for _ in items]

    def partial(voiced_end: int) -> dict:
        got = []
        job = _Job("s", False, 0, 32000, np.zeros(32000, np.float32))
        _decode([job], OneText(), ListenerConfig(), lambda sid, kind, **kw: got.append(kw), lambda sid: voiced_end)
        return got[0]

    assert partial(32000 + int(2 * SAID_MORE_S * 16000))["said_more"] is True
    assert "said_more" not in partial(32000), "the voice ended with its audio"
    assert "said_more" not in partial(30000)


def test_a_pause_after_a_partial_that_heard_all_the_voice_is_told_once_with_that_partial():
    from types import SimpleNamespace

    from tandem.listener import whisper
    from tandem.listener.worker import _Stream, _tell_pause

    vad = SimpleNamespace(samples_seen=32000, last_voiced_end=28000, silence_so_far_s=lambda: 0.05)
    st = _Stream(vad, None, utt_start=0, heard=(0, 28800, whisper.Transcript("How many legs?", 0.0, 80.0)))
    sent: list[dict] = []
    emit = lambda sid, kind, **kw: sent.append({"sid": sid, "kind": kind, **kw})  # noqa: E731
    _tell_pause("s", st, emit)
    assert sent == [], "not a pause yet"
    vad.silence_so_far_s = lambda: 0.12
    _tell_pause("s", st, emit)
    _tell_pause("s", st, emit)
    assert [(m["text"], m["paused"], m["reused"]) for m in sent] == [("How many legs?", True, True)], "once"
    vad.last_voiced_end = 33000  # the user spoke again: this partial no longer holds all of it
    _tell_pause("s", st, emit)
    assert len(sent) == 1


class _LengthWhisper(_FakeWhisperDecodes):
    """Hears each clip as its length, so a transcript tells which audio it came from."""

    delay_s = 0.05
    decoded: list[int] = []

    def transcribe_many(self, items, full_context=False):  # noqa: ANN001, ARG002
        from tandem.listener import whisper

        time.sleep(self.delay_s)
        type(self).decoded += [len(a) for a, _ in items]
        return [whisper.Transcript(f"heard {len(a)} samples", 0.0, self.delay_s * 1e3) for a, _ in items]


@pytest.mark.parametrize("reuse", [True, False])
def test_a_final_whose_speech_the_paused_partial_decoded_is_sent_at_the_endpoint_without_a_decode(monkeypatch, reuse):
    """The partial due as the user paused decoded all of the turn's voiced audio: the final is that
    transcript, sent when the endpoint comes, with no decode of its own. Off, the final is decoded."""
    from tandem.listener import worker

    _LengthWhisper.decoded = []
    msgs, _ = _worker_hears_question(monkeypatch, _LengthWhisper, ["s"], worker.ListenerConfig(reuse_paused_partial=reuse),
                                     queue.Queue())
    kinds = [m for m in msgs if m.get("kind") in ("partial", "vad_end", "final")]
    finals = [m for m in kinds if m["kind"] == "final"]
    assert len(finals) == 1
    final, last_partial = finals[0], [m for m in kinds if m["kind"] == "partial"][-1]
    assert kinds.index(last_partial) < kinds.index(final)
    partials = [m for m in kinds if m["kind"] == "partial"]
    decoded_partials = sum(not m.get("reused") for m in partials)
    assert last_partial.get("paused"), "the pause's partial says so (the scheduler may settle on it)"
    assert not any(m.get("paused") for m in partials[:-1])
    if last_partial.get("reused"):  # the partial before it had decoded all the voice already: sent again
        assert last_partial["text"] == partials[-2]["text"] and last_partial["decode_ms"] == 0.0
    if reuse:
        assert final.get("reused") and final["decode_ms"] == 0.0
        assert final["text"] == last_partial["text"], "the paused partial's words"
        assert kinds[kinds.index(final) - 1]["kind"] == "vad_end", "sent with the endpoint"
        assert len(_LengthWhisper.decoded) == 1 + decoded_partials, "warm-up, partials, no final"
    else:
        assert not final.get("reused") and final["decode_ms"] > 0
        assert len(_LengthWhisper.decoded) == 2 + decoded_partials


def test_a_final_with_speech_after_the_last_partial_is_decoded():
    """Voice that came back after the last partial (or a partial from another start) is not the final's
    words: only a partial covering every voiced sample from the same start stands in for the decode."""
    from types import SimpleNamespace

    from tandem.listener.whisper import Transcript
    from tandem.listener.worker import ListenerConfig, _next_jobs, _Stream

    vad = SimpleNamespace(samples_seen=40000, last_voiced_end=30000, silence_so_far_s=lambda: 0.6)
    heard = Transcript("what is the capital of", 0.0, 90.0)
    for h, reused in (((0, 32000, heard), True), ((0, 28000, heard), False), ((4000, 32000, heard), False)):
        st = _Stream(vad, None, audio=np.zeros(40000, np.float32), utt_start=None, last_partial_end=h[1],
                     finals=[(0, 32400, 30000)], heard=h)
        jobs = _next_jobs({"s": st}, ListenerConfig())
        assert len(jobs) == 1 and jobs[0].final and (jobs[0].reuse is heard) == reused, h
        assert len(jobs[0].audio) == (0 if reused else 32400)
