"""Speech synthesis off the frame loop: text segments in, 80 ms frames of audio out.

A `Voicer` owns one synthesis thread; the frame loop only enqueues text and pulls samples
(both O(1), never waiting). A new TTS engine plugs in by implementing `TTS`.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from ..audio.frames import FRAME_SAMPLES, SAMPLE_RATE, resample

log = logging.getLogger(__name__)


class TTS(Protocol):
    sample_rate: int

    def synthesize(self, text: str) -> np.ndarray:
        """float32 mono audio at `sample_rate` for one segment of text."""
        ...


# hibari says a segment as a whole utterance, so a word voiced alone is drawn out like the end of a
# sentence: on 12 answer sentences, voiced word by word they took 1.49x as long as voiced whole, two
# words at a time 1.22x, three 1.11x (scripts/phrase_pace.py). A front-end hands the voice a reply a
# word or two at a time while it speaks, so short segments are said faster (the cascade's short
# sentences too: both modes share the voice, so a comparison stays fair). Not by all of it:
# Whisper tiny.en heard 88 of 93 words voiced one by one at speed 1.0, 85 at 1.3, 83 at 1.4 (90 whole).
# Keeping names, numbers and a sentence's last word at the voice's pace was tried and measured worse
# (docs/history/BENCHMARKS-rounds.md, "A slower LLM, third round"): the question's own names stand before the answer.
# But a sentence's last word voiced alone, most often the answer itself ("It" / "is" / "Oslo."), keeps
# the voice's pace: sped up, Whisper heard "It is as low.", "narrow B", "a cry" (16 of 20 short answers
# after "It" and "is"; 18 of 20 at the voice's pace), and slowing the end of a reply delays no word of it.
SHORT_SEGMENT_SPEED = {1: 1.3, 2: 1.15, 3: 1.1}
SENTENCE_ENDS = (".", "!", "?")


def segment_speed(text: str) -> float:
    words = text.split()
    if len(words) == 1 and words[0].endswith(SENTENCE_ENDS):
        return 1.0
    return SHORT_SEGMENT_SPEED.get(len(words), 1.0)


class HibariTTS:
    """hibari-tts (24 kHz, int8 ONNX, about 8 MB): the assistant's embedded voice."""

    sample_rate = 24_000
    repeatable = True  # a fixed seed: the same text, the same audio (the Voicer caches short segments)

    def __init__(self, voice: str = "heart", threads: int = 1, seed: int = 0) -> None:
        from hibari import Hibari

        self._tts = Hibari(voice=voice, threads=threads)
        self._seed = seed
        # loads the lexicons, the out-of-vocabulary model and the number rules, so the first real
        # sentence does not pay for them (a cold OOV word cost ~50 ms of held GIL)
        self._tts("Ready. Zorbly's 1,234 quelvits cost $5.", seed=seed)

    def synthesize(self, text: str) -> np.ndarray:
        from .pronounce import respell  # hibari's own phoneme syntax, so here and not for every engine

        return self._tts(respell(text), speed=segment_speed(text), seed=self._seed)


def trim_leading_silence(audio: np.ndarray, threshold: float = 0.003, keep_s: float = 0.02) -> np.ndarray:
    """Drop the quiet lead-in some TTS models put before the first phoneme: it is pure latency."""
    loud = np.flatnonzero(np.abs(audio) > threshold)
    if not len(loud):
        return audio
    return audio[max(0, int(loud[0]) - int(keep_s * SAMPLE_RATE)):]


def trim_trailing_silence(audio: np.ndarray, keep_s: float, threshold: float = 0.003) -> np.ndarray:
    """Cut the quiet tail after the last phoneme down to `keep_s`. A front-end voices a response
    phrase by phrase, and hibari ends every segment with ~0.35 s of silence: left in, each phrase
    boundary would become a pause."""
    loud = np.flatnonzero(np.abs(audio) > threshold)
    if not len(loud):
        return audio
    return audio[: int(loud[-1]) + 1 + int(keep_s * SAMPLE_RATE)]


PHRASE_TAIL_S = 0.04  # kept after a segment that ends mid-sentence
SENTENCE_TAIL_S = 0.2  # kept after a segment that ends a sentence


def trim_segment(audio: np.ndarray, text: str) -> np.ndarray:
    """A segment's audio as the voice plays it: no lead-in, and the tail its place in a sentence keeps."""
    audio = trim_leading_silence(np.asarray(audio, np.float32))
    return trim_trailing_silence(audio, SENTENCE_TAIL_S if text.rstrip()[-1:] in ".?!" else PHRASE_TAIL_S)


class PhraseCache:
    """The audio of short segments already synthesized, shared by every Voicer of one TTS engine.

    A reply's first word goes to the voice alone ("The", "Okay,"), and a synthesis takes a frame or
    more: asked for a word it has voiced before, the Voicer plays it in the same frame instead of the
    next (80 ms sooner onset). Only engines that give the same audio for the same text say so
    (`repeatable`, hibari with its fixed seed), so the cached audio is what a new synthesis would give."""

    MAX_WORDS = 2
    MAX_ENTRIES = 512

    def __init__(self) -> None:
        self._audio: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def holds(cls, text: str) -> bool:
        return len(text.split()) <= cls.MAX_WORDS and len(text) <= 24

    def get(self, text: str) -> np.ndarray | None:
        with self._lock:
            audio = self._audio.get(text)
            if audio is not None:
                self._audio.move_to_end(text)
            return audio

    def put(self, text: str, audio: np.ndarray) -> None:
        if not self.holds(text) or not len(audio):
            return
        with self._lock:
            self._audio[text] = audio
            self._audio.move_to_end(text)
            while len(self._audio) > self.MAX_ENTRIES:
                self._audio.popitem(last=False)

    def __contains__(self, text: str) -> bool:
        with self._lock:
            return text in self._audio

    def clear(self) -> None:
        """Forget every phrase (to compare configurations from the same start)."""
        with self._lock:
            self._audio.clear()


# What the compact front-end says first in most replies (the bench's timelines: "The" in 64% of
# them, "Okay," in 14%), and common English openers: voiced once when the first Voicer of an engine
# starts, so even a session's first reply starts in the frame its first word is said.
FIRST_WORDS = ("The", "Okay,", "A", "It", "In", "There", "Well,", "Sorry,", "Yes,", "No,", "I", "Hmm,")

_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def phrase_cache(tts: TTS) -> PhraseCache:
    """The one cache of `tts` (a new one for an engine that cannot be weakly referenced)."""
    with _CACHES_LOCK:
        try:
            cache = _CACHES.get(tts)
            if cache is None:
                cache = _CACHES[tts] = PhraseCache()
            return cache
        except TypeError:
            return PhraseCache()


def _cache_of(tts: TTS) -> PhraseCache | None:
    """The phrase cache of an engine that gives the same audio for the same text (`repeatable`), or
    None (TANDEM_PHRASE_CACHE=0 turns caching off, to measure what it buys side by side)."""
    repeatable = bool(getattr(tts, "repeatable", False)) and os.environ.get("TANDEM_PHRASE_CACHE", "1") != "0"
    return phrase_cache(tts) if repeatable else None


def warm_first_words(tts: TTS) -> int:
    """Voice FIRST_WORDS into the engine's cache now, at start-up; returns how many were voiced. A
    Voicer otherwise voices them in its thread during the first session, and that synthesis holds the
    GIL in Python for tens of milliseconds at a time while the frame loop waits (the first bench
    session's first frame took 200 ms, 168 of them blocked)."""
    cache = _cache_of(tts)
    if cache is None:
        return 0
    todo = [t for t in FIRST_WORDS if t not in cache]
    for text in todo:
        segment_audio(tts, cache, text)
    return len(todo)


def cached_audio(cache: PhraseCache | None, text: str) -> np.ndarray | None:
    """The audio `cache` holds for `text`, or None."""
    return cache.get(text) if cache is not None and cache.holds(text) else None


def segment_audio(tts: TTS, cache: PhraseCache | None, text: str) -> np.ndarray:
    """A segment's audio at the output rate, trimmed: from the cache, else synthesized (and cached).
    A failed synthesis is logged and gives no audio: a bad sentence must not silence the rest."""
    cached = cached_audio(cache, text)
    if cached is not None:
        return cached
    try:
        audio = tts.synthesize(text)
        if getattr(tts, "sample_rate", SAMPLE_RATE) != SAMPLE_RATE:
            audio = resample(audio, tts.sample_rate, SAMPLE_RATE)
    except Exception as e:  # noqa: BLE001
        log.error("TTS failed on %r: %s", text[:60], e)
        return np.zeros(0, np.float32)
    audio = np.asarray(trim_segment(audio, text), np.float32)
    if cache is not None:
        cache.put(text, audio)
    return audio


@dataclass(frozen=True)
class Cut:
    """A segment whose playback `clear()` stopped part-way: its text and the share of its audio heard."""
    text: str
    heard: float


@dataclass
class _Segment:
    text: str
    audio: np.ndarray
    pos: int = 0
    announced: bool = False


class Voicer:
    """Queue of text segments voiced in order by a background thread."""

    def __init__(self, tts: TTS, on_ready: Callable[[str, float], None] | None = None) -> None:
        self.tts = tts
        # only an engine that gives the same audio for the same text (`repeatable`) is cached
        # (TANDEM_PHRASE_CACHE=0 turns it off, to measure what it buys side by side)
        self.cache: PhraseCache | None = _cache_of(tts)
        self.cached = 0  # segments played from the cache, in the frame they were asked for
        self._todo: queue.Queue[tuple[int, str] | None] = queue.Queue(maxsize=self.MAX_WAITING + 1)  # + close
        self.dropped = 0  # segments refused because MAX_WAITING were already waiting
        self._ready: deque[_Segment] = deque()
        self._generation = 0  # bumped by clear(); stale syntheses are thrown away
        self.cuts: list[Cut] = []  # segments cut mid-playback, until the session takes them (take_cuts)
        self._paused = False  # pull() plays nothing and keeps its place (the user talks over the voice)
        self._pending = 0  # syntheses queued or under way for the current generation (stale ones are not waited for)
        self._lock = threading.Lock()
        self.on_ready = on_ready
        self._closed = False
        # voiced while the thread has nothing else to do (a session's user speaks first)
        self._warm = deque(t for t in FIRST_WORDS if self.cache is not None and t not in self.cache)
        self._thread = threading.Thread(target=self._work, name="voicer", daemon=True)
        self._thread.start()

    # A response is voiced phrase by phrase, a few at a time; 64 waiting means the engine is far
    # behind (or hung) and what comes now would be heard half a minute late: it is dropped instead.
    MAX_WAITING = 64

    def say(self, text: str) -> None:
        text = text.strip()
        if text:
            audio = self._cached(text)
            with self._lock:
                if audio is not None and self._pending == 0:  # nothing before it: it plays in this frame
                    self._ready.append(_Segment(text, audio))
                    self.cached += 1
                    gen = None
                elif self._todo.qsize() >= self.MAX_WAITING:
                    self.dropped += 1
                    log.warning("the voice is %d segments behind: %r is not voiced", self.MAX_WAITING, text[:40])
                    return
                else:
                    self._pending += 1
                    gen = self._generation
            if gen is not None:
                self._todo.put((gen, text))
            elif self.on_ready is not None:
                self.on_ready(text, 0.0)

    def pause(self) -> None:
        """Fall silent at once and keep the place: `pull` returns zeros until `resume` (the voice goes
        on with the very next sample) or `clear` (what was left is dropped, the segment under way cut
        where it paused). The user talking over the voice may be a backchannel or an interruption,
        and which one is known only later (tandem/turn/backchannel.py)."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False

    @property
    def paused(self) -> bool:
        with self._lock:
            return self._paused

    def clear(self) -> Cut | None:
        """Drop everything not yet played, and end a pause (what is said next is played). A segment
        already started (its text reported by `pull` as said) is cut part-way: that is recorded in
        `cuts`, so the dialogue history can keep only what was heard."""
        with self._lock:
            self._generation += 1
            self._pending = 0  # what is still being synthesized is thrown away when done: nothing to wait for
            self._paused = False
            cut = None
            if self._ready and self._ready[0].announced and self._ready[0].pos < len(self._ready[0].audio):
                seg = self._ready[0]
                cut = Cut(seg.text, seg.pos / len(seg.audio))
                self.cuts.append(cut)
            self._ready.clear()
            return cut

    def playing(self) -> Cut | None:
        """The segment being played, with the share of it played so far (None between segments):
        where a `clear` now would cut it."""
        with self._lock:
            if self._ready and self._ready[0].announced and self._ready[0].pos < len(self._ready[0].audio):
                seg = self._ready[0]
                return Cut(seg.text, seg.pos / len(seg.audio))
            return None

    def take_cuts(self) -> list[Cut]:
        with self._lock:
            cuts, self.cuts = self.cuts, []
            return cuts

    @property
    def busy(self) -> bool:
        """True while something is being synthesized or waits to be played."""
        with self._lock:
            return self._pending > 0 or bool(self._ready)

    def remaining_s(self) -> float:
        """Seconds of synthesized audio not yet played; infinite while a synthesis is pending."""
        with self._lock:
            if self._pending > 0:
                return float("inf")
            return sum(len(s.audio) - s.pos for s in self._ready) / SAMPLE_RATE

    @property
    def synthesizing(self) -> bool:
        with self._lock:
            return self._pending > 0

    def pull(self, n: int = FRAME_SAMPLES) -> tuple[np.ndarray, list[str]]:
        """The next n samples (zeros where nothing is ready, and while paused) and the texts whose
        audio starts in them."""
        out = np.zeros(n, dtype=np.float32)
        started: list[str] = []
        filled = 0
        with self._lock:
            while filled < n and self._ready and not self._paused:
                seg = self._ready[0]
                if not seg.announced:
                    seg.announced = True
                    started.append(seg.text)
                take = min(n - filled, len(seg.audio) - seg.pos)
                out[filled: filled + take] = seg.audio[seg.pos: seg.pos + take]
                seg.pos += take
                filled += take
                if seg.pos >= len(seg.audio):
                    self._ready.popleft()
        return out, started

    def _cached(self, text: str) -> np.ndarray | None:
        return cached_audio(self.cache, text)

    def _audio_for(self, text: str) -> np.ndarray:
        return segment_audio(self.tts, self.cache, text)

    def close(self) -> None:
        with self._lock:
            self._generation += 1  # what is still queued is not synthesized: the thread ends at once
            self._closed = True
        self._todo.put(None)
        self._thread.join(timeout=5)

    def _work(self) -> None:
        while True:
            if self._warm and self._todo.empty() and not self._closed:
                self._audio_for(self._warm.popleft())
                continue
            item = self._todo.get()
            if item is None:
                return
            gen, text = item
            with self._lock:
                if gen != self._generation:  # cleared (barge-in) or closed before its turn came: skip it
                    continue
            t0 = time.perf_counter()
            audio = self._audio_for(text)
            ms = (time.perf_counter() - t0) * 1e3
            with self._lock:
                if gen == self._generation:
                    self._pending -= 1
                    if len(audio):
                        self._ready.append(_Segment(text, np.asarray(audio, np.float32)))
            if self.on_ready is not None:
                self.on_ready(text, ms)
