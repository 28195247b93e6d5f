"""The Listener process: VAD and Whisper for any number of audio streams, off the frame loop.

The feed thread takes audio as it comes, resamples it and runs the VAD, so voice activity (what the
front-end takes its turn from) is reported within a frame of the audio arriving, never behind a Whisper
decode: with one thread a decode of 50-450 ms held every stream's VAD up, and the front-end heard the
user stop that much later. The decode threads (`decode_lanes`, one decode each; CTranslate2 releases the
GIL while it works; `decode_batch` > 1 batches several streams' decodes) run Whisper: a final transcript
always goes before any partial, and one lane is kept for finals and the partials due as a user pauses,
so these never wait behind the partial of a stream still talking, nor share the cores with one begun
while they decode; partials are re-decoded every
`partial_hop_s` of new speech or as soon as the user pauses, a paused stream first, then the most stale,
and never over audio that is only silence since the last one.
Each decode is told the stream's context (the user's earlier turns). Every message from
here carries the stream's audio time, so the session can measure staleness on its own clock.
"""
from __future__ import annotations

import queue
import re
import threading
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from .vad import SAMPLE_RATE, VadConfig, VadSegmenter

IN_RATE = 24_000


@dataclass(frozen=True)
class ListenerConfig:
    vad: VadConfig = VadConfig()
    partial_hop_s: float = 0.3  # new speech between partial decodes
    preroll_s: float = 0.3  # audio kept before the VAD onset (Silero reacts late)
    tail_s: float = 0.15  # audio kept after the last voiced window in a final
    max_utterance_s: float = 25.0  # longer turns are finalised in pieces (Whisper sees 30 s at most)
    # threads of one Whisper decode. On 2 cores one thread decodes faster than two (3 s of speech: 82 against
    # 96 ms idle, 80 against 92 ms with the other core busy; scripts/whisper_lanes.py), and leaves the other
    # core to a second decode
    whisper_threads: int = 1
    # decodes run at once, each on a thread of its own; one of them is kept for what a user waits on (a final,
    # the partial due as the user pauses): a partial of a stream still talking never takes the last lane
    decode_lanes: int = 2
    whisper_model_dir: str | None = None
    full_context_final: bool = False
    # decodes of different streams run as one batch, up to this many (1: one at a time). Idle, 4 partials
    # took 223 ms as a batch against 372 ms one by one; on 2 cores busy with 4 sessions it lost (every
    # stream waits for the whole batch: docs/history/BENCHMARKS-rounds.md, sixth round), so it is for spare cores
    decode_batch: int = 1
    # a final whose voiced audio a partial already decoded in full (the partial due as the user paused) is
    # that partial's transcript, sent at the endpoint with no decode of its own: the audio after it is
    # silence, which cannot change the words. Off: every final decoded anew (to measure it)
    reuse_paused_partial: bool = True
    # a partial of a stream still talking starts only while no final or pause is being decoded: on 2 cores
    # shared with the LLM and the frame loop, a pause decoded beside another stream's hop took twice as long
    # (319 against 153 ms median at 6 sessions), and the front-end waits for that pause on a question whose
    # end it does not take by itself. Off: a hop may run beside them on the other lane (the rule before)
    hops_yield: bool = True


@dataclass
class _Stream:
    vad: VadSegmenter
    resampler: object
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # 16 kHz, from `offset`
    offset: int = 0  # absolute 16 kHz index of audio[0]
    utt_start: int | None = None
    last_partial_end: int = 0
    finals: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, last voiced sample) awaiting decode
    heard: tuple[int, int, object] | None = None  # the last partial sent: (start, end, its Transcript)
    decoding: bool = False  # a decode of this stream is under way
    pause_told: int = -1  # the last voiced sample of the pause last told (a partial marked `paused`)
    context: str = ""  # the user's earlier turns, read by Whisper as the text before this audio

    def slice(self, start: int, end: int) -> np.ndarray:
        return self.audio[max(0, start - self.offset): max(0, end - self.offset)]

    def trim(self, keep_from: int) -> None:
        cut = keep_from - self.offset
        if cut > 0:
            self.audio = self.audio[cut:]
            self.offset = keep_from


def run_worker(inbox, outbox, config: ListenerConfig) -> None:
    """Process entry point. inbox: ("open", sid[, start sample at 16 kHz]) | ("audio", sid, float32 24 kHz)
    | ("context", sid, text) | ("close", sid) | ("stop",)."""
    import soxr

    from .whisper import ShortContextWhisper

    try:
        stt = ShortContextWhisper(config.whisper_model_dir, threads=config.whisper_threads, lanes=config.decode_lanes)
        stt.transcribe(np.zeros(SAMPLE_RATE, np.float32))  # warm-up: the first decode allocates
    except Exception as e:  # noqa: BLE001 - reported to the parent, which owns the user-facing error
        outbox.put({"kind": "fatal", "error": f"Listener could not load Whisper: {e}"})
        return
    outbox.put({"kind": "ready"})
    streams: dict[str, _Stream] = {}
    lock = threading.Condition()  # guards `streams` and their state; notified when decoding work is due

    def emit(sid: str, kind: str, **kw) -> None:
        if kind in ("partial", "final"):  # stamped on the wall clock: the session measures its transit
            kw["sent_t"] = time.time()
        outbox.put({"sid": sid, "kind": kind, **kw})

    def handle(msg) -> bool:
        with lock:
            return _handle(msg)

    def _handle(msg) -> bool:
        op = msg[0]
        if op == "stop":
            return False
        sid = msg[1]
        if op == "open":
            st = _Stream(VadSegmenter(config.vad), soxr.ResampleStream(IN_RATE, SAMPLE_RATE, 1, dtype="float32"))
            start = int(msg[2]) if len(msg) > 2 else 0  # a restarted Listener continues the stream's clock
            st.vad.start_at(start)
            st.offset = st.last_partial_end = start
            streams[sid] = st
        elif op == "close":
            streams.pop(sid, None)
        elif op == "context":
            if sid in streams:
                streams[sid].context = str(msg[2])
        elif op == "audio":
            st = streams.get(sid)
            if st is None:
                return True
            pcm16 = st.resampler.resample_chunk(np.asarray(msg[2], np.float32))
            st.audio = np.concatenate([st.audio, pcm16])
            probs, events = st.vad.feed(pcm16)
            for ev in events:
                if ev.kind == "start":
                    st.utt_start = max(0, ev.sample - int(config.preroll_s * SAMPLE_RATE))
                    st.last_partial_end = ev.sample
                    st.heard = None
                    emit(sid, "vad_start", audio_s=ev.sample / SAMPLE_RATE)
                else:
                    emit(sid, "vad_end", audio_s=ev.sample / SAMPLE_RATE, speech_s=ev.speech_s)
                    if st.utt_start is not None and ev.speech_s >= config.vad.min_speech_s:
                        end = min(st.vad.samples_seen, ev.sample + int(config.tail_s * SAMPLE_RATE))
                        st.finals.append((st.utt_start, end, ev.sample))
                        # sent at once when the paused partial decoded all of it: not after a decode under way
                        for job in _reused_finals(sid, st, config):
                            _emit_final(job, job.reuse, emit, batch=0, reused=True)
                    st.utt_start = None
            if st.utt_start is not None and st.vad.samples_seen - st.utt_start > config.max_utterance_s * SAMPLE_RATE:
                st.finals.append((st.utt_start, st.vad.samples_seen, st.vad.samples_seen))
                st.utt_start = st.last_partial_end = st.vad.samples_seen
            keep = min([st.utt_start if st.utt_start is not None else st.vad.samples_seen - int(config.preroll_s * SAMPLE_RATE)]
                       + [f[0] for f in st.finals])
            st.trim(max(0, keep))
            _tell_pause(sid, st, emit)
            due = bool(st.finals) or _partial_due(st, config)
            emit(sid, "progress", audio_s=st.vad.samples_seen / SAMPLE_RATE, vad_prob=st.vad.chunk_prob(probs),
                 in_speech=st.vad.in_speech, busy=due or st.decoding)
            if due:
                lock.notify()
        return True

    def voiced_end(sid: str) -> int:  # read without the lock: an int the feed thread replaces
        st = streams.get(sid)
        return st.vad.last_voiced_end if st is not None else 0

    stopping = threading.Event()
    hops = [0]  # partials of streams still talking being decoded now (guarded by `lock`)
    urgent = [0]  # finals and pauses being decoded now (guarded by `lock`)

    def next_jobs() -> list[_Job]:
        jobs = _next_jobs(streams, config, hops_free=_hops_free(config, hops[0], urgent[0]))
        hops[0] += sum(j.hop for j in jobs)
        urgent[0] += sum(j.urgent for j in jobs)
        return jobs

    def decode_loop() -> None:
        while not stopping.is_set():
            with lock:
                jobs = next_jobs()
                while not jobs and not stopping.is_set():
                    lock.wait(timeout=0.5)
                    jobs = next_jobs()
            if jobs:
                try:
                    _decode(jobs, stt, config, emit, voiced_end)
                except Exception:  # noqa: BLE001 - one failed decode must not end the Listener
                    for job in jobs:
                        emit(job.sid, "error", error="Listener decode failed: "
                             + traceback.format_exc(limit=1).strip().splitlines()[-1])
                finally:
                    with lock:
                        hops[0] -= sum(j.hop for j in jobs)
                        urgent[0] -= sum(j.urgent for j in jobs)
                        lock.notify_all()  # a stream skipped while this decode ran may have work due
                        for job in jobs:
                            if job.sid in streams:
                                st = streams[job.sid]
                                st.decoding = False
                                if not job.final and job.sent is not None:
                                    st.heard = (job.start, job.end, job.sent)
                                _tell_pause(job.sid, st, emit)

    decoders = [threading.Thread(target=decode_loop, name=f"listener-decode-{i}", daemon=True)
                for i in range(max(1, config.decode_lanes))]
    for decoder in decoders:
        decoder.start()
    running = True
    try:
        while running:
            msg = inbox.get()
            try:
                running = handle(msg)
            except Exception:  # noqa: BLE001 - one bad message must not kill every stream
                outbox.put({"sid": msg[1] if len(msg) > 1 else None, "kind": "error",
                            "error": "Listener failed on a message: " + traceback.format_exc(limit=1).strip().splitlines()[-1]})
    finally:
        stopping.set()
        with lock:
            lock.notify_all()
        for decoder in decoders:
            decoder.join(timeout=5)


def _hops_free(config: ListenerConfig, hops: int, urgent: int) -> bool:
    """Whether a partial of a stream still talking may start now, with `hops` of them and `urgent` finals
    and pauses being decoded: never on the last lane, and (`hops_yield`) not beside a final or a pause."""
    if config.decode_lanes < 2:
        return True
    return hops < config.decode_lanes - 1 and not (config.hops_yield and urgent)


# a stream this long quiet inside its turn has (for now) said its last words: its partial goes first
PAUSED_S = 0.1


def _paused(st: _Stream) -> bool:
    """The stream's user has been quiet PAUSED_S inside their turn."""
    return st.vad.silence_so_far_s() >= PAUSED_S


def _partial_due(st: _Stream, config: ListenerConfig) -> bool:
    """A partial is due after `partial_hop_s` of new audio, or as soon as the user pauses, if any of it
    was voiced: audio that is only silence since the last partial (the endpoint's 0.4 s, a pause) cannot
    change the transcript."""
    if st.utt_start is None or st.vad.last_voiced_end <= st.last_partial_end:
        return False
    return (st.vad.samples_seen - st.last_partial_end >= config.partial_hop_s * SAMPLE_RATE
            or _paused(st))


def _partial_order(st: _Stream) -> tuple[bool, int]:
    """Which due partial first: a stream whose user has just paused (its partial holds the question's
    last words, what the front-end takes its turn on; with 4 streams and one decode at a time these came
    0.2-1.6 s late), then the most stale: the most audio heard since its last partial. (Each stream
    counts samples from its own start, so positions of different streams do not compare: ordered by
    position, a session that connected later went first every time.)"""
    return (not _paused(st), st.last_partial_end - st.vad.samples_seen)


def _heard_all(st: _Stream, start: int, voiced_end: int) -> bool:
    """The last partial sent decoded all the voice from `start` to `voiced_end`: what follows is silence."""
    return st.heard is not None and st.heard[0] == start and st.heard[1] >= voiced_end


def _tell_pause(sid: str, st: _Stream, emit) -> None:  # noqa: ANN001
    """A user who paused after a partial that already decoded all their voiced audio (a hop's partial
    0.05 s into the pause) gets no partial of the pause's own, as there is nothing new to decode: that
    partial is sent again, marked `paused` (and `reused`: no decode), once the pause is PAUSED_S long."""
    if (st.utt_start is None or st.decoding or st.heard is None or st.pause_told == st.vad.last_voiced_end
            or not _paused(st)):
        return
    if not _heard_all(st, st.utt_start, st.vad.last_voiced_end):
        return
    start, end, tr = st.heard
    st.pause_told = st.vad.last_voiced_end
    emit(sid, "partial", text=_clean(tr.text), audio_start_s=start / SAMPLE_RATE, audio_s=end / SAMPLE_RATE,
         decode_ms=0.0, batch=0, paused=True, reused=True)


@dataclass
class _Job:
    sid: str
    final: bool
    start: int
    end: int
    audio: np.ndarray  # copied under the lock: the feed thread trims the stream's buffer meanwhile
    context: str = ""
    reuse: object | None = None  # a final's transcript already decoded by a partial (`_reused_finals`): no decode
    paused: bool = False  # a partial due as the user paused: all the voiced audio so far, silence after it
    sent: object | None = None  # a partial's Transcript, once decoded and sent
    due_s: float = 0.0  # a partial: how long it had been due, by its stream's audio, when a lane took it

    @property
    def hop(self) -> bool:
        """A partial of a stream still talking: the one kind of decode that may not take the last lane."""
        return not self.final and not self.paused and self.reuse is None

    @property
    def urgent(self) -> bool:
        """A final or a pause being decoded: what a user waits on."""
        return (self.final or self.paused) and self.reuse is None


def _reused_finals(sid: str, st: _Stream, config: ListenerConfig) -> list[_Job]:
    """The stream's next finals whose voiced audio the partial sent last decoded in full (from the same
    start, up to or past the last voiced sample: what is left is the endpoint's silence), taken off its
    queue as jobs that need no decode."""
    jobs = []
    while config.reuse_paused_partial and st.finals and _heard_all(st, st.finals[0][0], st.finals[0][2]):
        start, end, _ = st.finals.pop(0)
        jobs.append(_Job(sid, True, start, end, np.zeros(0, np.float32), st.context, reuse=st.heard[2]))
    return jobs


def _next_jobs(streams: dict[str, _Stream], config: ListenerConfig, hops_free: bool = True) -> list[_Job]:
    """The next decodes (called with the lock held), one per stream, at most `decode_batch`: every
    stream's final first, then the partials in `_partial_order`; with `hops_free` False, only partials
    due as the user pauses. A stream already being decoded on another lane waits for it, so that its
    messages go out in the order of its audio."""
    jobs: list[_Job] = []
    for sid, st in streams.items():
        if st.decoding:
            continue
        jobs += _reused_finals(sid, st, config)  # they cost no decode: not counted against the batch
        if st.finals and sum(j.reuse is None for j in jobs) < config.decode_batch:
            start, end, _ = st.finals.pop(0)
            st.decoding = True
            jobs.append(_Job(sid, True, start, end, st.slice(start, end).copy(), st.context))
    taken = {j.sid for j in jobs}
    due = sorted((_partial_order(st), sid) for sid, st in streams.items()
                 if sid not in taken and not st.decoding and _partial_due(st, config)
                 and (hops_free or _paused(st)))
    for _, sid in due[:max(0, config.decode_batch - sum(j.reuse is None for j in jobs))]:
        st = streams[sid]
        end = st.vad.samples_seen
        paused = _paused(st)
        due_s = st.vad.silence_so_far_s() - PAUSED_S if paused else (end - st.last_partial_end) / SAMPLE_RATE - config.partial_hop_s
        st.last_partial_end = end
        st.decoding = True
        if paused:
            st.pause_told = st.vad.last_voiced_end
        jobs.append(_Job(sid, False, st.utt_start, end, st.slice(st.utt_start, end).copy(), st.context, paused=paused,
                         due_s=round(max(0.0, due_s), 3)))
    return jobs


# voice this long past a partial's audio, heard by the time it is decoded: the user said more after it
SAID_MORE_S = 0.1


def _decode(jobs: list[_Job], stt, config: ListenerConfig, emit, voiced_end=lambda sid: 0) -> None:  # noqa: ANN001
    """One batch of decodes, outside the lock (the feed thread goes on meanwhile). A final asked with
    the whole 30 s context (`full_context_final`) is decoded apart from the partials. A partial is marked
    `said_more` when the stream's voice went on past its audio (`voiced_end(sid)`: its last voiced sample
    now): Whisper ends a cut-off "What is the capital" with a question mark, which is not where the
    question ended."""
    for job in jobs:
        if job.reuse is not None:  # its partial was still decoding when the endpoint came
            _emit_final(job, job.reuse, emit, batch=0, reused=True)
    jobs = [j for j in jobs if j.reuse is None]
    groups = [[j for j in jobs if j.final], [j for j in jobs if not j.final]] if config.full_context_final else [jobs]
    for group in groups:
        if not group:
            continue
        full = config.full_context_final and group[0].final
        for job, tr in zip(group, transcribe_in_context(stt, [(j.audio, j.context) for j in group], full)):
            if job.final:
                _emit_final(job, tr, emit, batch=len(group))
            elif tr.no_speech_prob < 0.6 and plausible(tr.text, (job.end - job.start) / SAMPLE_RATE):
                more = voiced_end(job.sid) - job.end > SAID_MORE_S * SAMPLE_RATE
                emit(job.sid, "partial", text=_clean(tr.text), audio_start_s=job.start / SAMPLE_RATE,
                     audio_s=job.end / SAMPLE_RATE, decode_ms=round(tr.decode_ms, 1), due_s=job.due_s, batch=len(group),
                     **({"paused": True} if job.paused else {}), **({"said_more": True} if more else {}))
                job.sent = tr


def _emit_final(job: _Job, tr, emit, batch: int, reused: bool = False) -> None:  # noqa: ANN001
    """`reused`: the transcript is a partial's that decoded all of this final's speech (decode_ms 0)."""
    text = tr.text if tr.no_speech_prob < 0.8 or len(tr.text) > 12 else ""
    emit(job.sid, "final", text=_clean(text), audio_start_s=job.start / SAMPLE_RATE, audio_s=job.end / SAMPLE_RATE,
         decode_ms=0.0 if reused else round(tr.decode_ms, 1), no_speech_prob=round(tr.no_speech_prob, 3),
         batch=batch, **({"reused": True} if reused else {}))


def _sentences(text: str) -> list[str]:
    return [" ".join(re.findall(r"[a-z0-9']+", part.lower())) for part in re.split(r"(?<=[.?!])\s+", text)]


def echoes(text: str, context: str) -> bool:
    """Whether `text` is one of the context's own sentences again: what Whisper, told the earlier
    turns, says over noise or a cough ("What is the capital of Canada?" over a second of hiss)."""
    said = " ".join(re.findall(r"[a-z0-9']+", text.lower()))
    return bool(said) and said in _sentences(context)


# an echo of the context this likely to be no speech is decoded again without it. Over a second of hiss Whisper
# told "What is the capital of Canada?" says it again at 0.86 (noise echoes at 0.86 and more, scripts/
# echo_probe.py); 72 questions asked again, at 0.004-0.21. Every echo was decoded again before, which doubled
# the cost of a repeated question's pause (the loadtest repeats its questions) and heard 11 of the 72 worse
# ("What is the capital and France?")
ECHO_NO_SPEECH = 0.4


def transcribe_in_context(stt, items: list[tuple[np.ndarray, str]], full_context: bool = False) -> list:  # noqa: ANN001
    """Decodes told the user's earlier turns (a follow-up's words heard in the light of the question
    before: "in a leap year", not "in a leap you here"), in one batch; one that only repeats an earlier
    turn, and that Whisper doubts is speech (ECHO_NO_SPEECH), is decoded again without them, so a context
    is never heard in place of the audio; a question asked again is heard as it was."""
    out = stt.transcribe_many(items, full_context=full_context)
    for i, ((audio, context), tr) in enumerate(zip(items, out)):
        if context.strip() and echoes(tr.text, context) and tr.no_speech_prob >= ECHO_NO_SPEECH:
            out[i] = stt.transcribe(audio, full_context=full_context)
    return out


MAX_WORDS_PER_S = 5.0  # people say 2-4; more means Whisper is looping on a fragment


def plausible(text: str, audio_s: float) -> bool:
    """False for the repetition loops Whisper can fall into on a short, cut-off fragment."""
    return len(text.split()) <= MAX_WORDS_PER_S * audio_s + 3


_NOISE = {"", ".", "you", "thank you.", "thanks for watching!", "[blank_audio]", "(silence)"}


def _clean(text: str) -> str:
    text = " ".join(text.split())
    return "" if text.lower() in _NOISE else text


def word_count(text: str) -> int:
    return len([w for w in text.split() if any(c.isalnum() for c in w)])

