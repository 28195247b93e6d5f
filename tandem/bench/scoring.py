"""Scoring what the assistant said: transcribe its channel with word times, find the answer."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..audio.frames import AUDIBLE, SAMPLE_RATE, resample
from ..speak.numbers import spoken_tokens


@dataclass(frozen=True)
class Word:
    text: str
    start: float
    end: float


def speech_end_of(signal: np.ndarray, threshold: float = 0.02, rate: int = SAMPLE_RATE) -> float | None:
    loud = np.flatnonzero(np.abs(signal) > threshold)
    return float(loud[-1] + 1) / rate if len(loud) else None


def onset_after(assistant: np.ndarray, t: float, threshold: float = AUDIBLE) -> float | None:
    """Seconds from `t` to the first assistant sample above silence after it (frame resolution)."""
    start = int(t * SAMPLE_RATE)
    loud = np.flatnonzero(np.abs(assistant[start:]) > threshold)
    return float(loud[0]) / SAMPLE_RATE if len(loud) else None


BLOCK_S = 0.02  # output audio is judged silent or audible in 20 ms blocks


def audible_blocks(assistant: np.ndarray) -> np.ndarray:
    """Per BLOCK_S block of the assistant's channel (a last partial block left out): audible or not."""
    hop = int(BLOCK_S * SAMPLE_RATE)
    n = len(assistant) // hop
    return np.abs(assistant[: n * hop]).reshape(n, hop).max(axis=1) > AUDIBLE


def response_gaps(assistant: np.ndarray, after: float, min_gap_s: float = 0.2) -> list[float]:
    """Silent stretches (>= min_gap_s) between the first and last audible 20 ms block after `after`:
    where the voice ran dry inside a response."""
    loud = audible_blocks(assistant[int(after * SAMPLE_RATE):])
    idx = np.flatnonzero(loud)
    if len(idx) < 2:
        return []
    gaps, run = [], 0
    for v in loud[idx[0]: idx[-1] + 1]:
        if v:
            if run * BLOCK_S >= min_gap_s:
                gaps.append(round(run * BLOCK_S, 3))
            run = 0
        else:
            run += 1
    return gaps


def normalize(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower()).split())


def find_answer(words: list[Word], answers: list[str], after: float = 0.0) -> Word | None:
    """The first accepted answer spoken after `after`, as one Word from its first word's start to its
    last word's end. Numbers match in their spoken form ("45", "forty-five" and "40, five" are one
    answer), and a short symbol spelled out too ("Au" heard as "A, U")."""
    tokens: list[tuple[str, Word]] = [(t, w) for w in words if w.end > after
                                      for n in normalize(w.text).split() for t in spoken_tokens(n)]
    heard = [t for t, _ in tokens]
    wanted = [[t for n in normalize(ans).split() for t in spoken_tokens(n)] for ans in answers]
    # a symbol or initialism is heard letter by letter ("Au" said as a chemist says it: "A U")
    wanted += [list(p[0]) for p in wanted if len(p) == 1 and p[0].isalpha() and 2 <= len(p[0]) <= 3]
    for i in range(len(heard)):
        for parts in wanted:
            if parts and heard[i: i + len(parts)] == parts:
                span: list[Word] = []
                for _, w in tokens[i: i + len(parts)]:
                    if not span or span[-1] is not w:
                        span.append(w)
                return Word(" ".join(w.text for w in span), span[0].start, span[-1].end)
    return None


def listening_context(question: str, answers: list[str]) -> str | None:
    """What a listener knows when the reply comes: the question just asked. Given to Whisper as its
    prompt, it hears "It is Seoul." and "It is flour." where, without it, a short answer came out as "It
    is so..." and "It is flower." (a full sentence restating the question was heard right either way,
    so the scorer favoured the cascade's long replies). None when an accepted answer is in the question
    itself: the prompt could then put the answer in Whisper's mouth."""
    q = f" {normalize(question)} "
    if any(normalize(a) and f" {normalize(a)} " in q for a in answers):
        return None
    return question or None


def hear(transcriber: "Transcriber", audio24k: np.ndarray, answers: list[str], context: str | None,
         after: float = 0.0) -> list[Word]:
    """A reply's words as the listener who asked hears them: Whisper prompted with `context` when that
    transcript holds an accepted answer (after `after`), else Whisper alone. A prompt also makes Whisper
    write the prompt itself over a reply it finds unclear ("Can you describe the water cycle step?" over a
    cut reply ending "It is Jupiter."), so it may add an answer the plain transcript missed and never take
    one away."""
    if context:
        words = transcriber.words(audio24k, context)
        if find_answer(words, answers, after) is not None:
            return words
    return transcriber.words(audio24k)


class Transcriber:
    """Whisper tiny.en (the bundled weights) with word timestamps, for scoring output audio."""

    def __init__(self, threads: int = 2) -> None:
        from faster_whisper import WhisperModel

        from ..listener.whisper import bundled_model_dir

        self.model = WhisperModel(str(bundled_model_dir()), device="cpu", compute_type="int8", cpu_threads=threads)

    def words(self, audio24k: np.ndarray, context: str | None = None) -> list[Word]:
        """`context`: the question the audio answers (`listening_context`), as Whisper's prompt."""
        if not len(audio24k) or float(np.max(np.abs(audio24k))) < AUDIBLE:
            return []
        x = resample(audio24k, SAMPLE_RATE, 16000)
        segs, _ = self.model.transcribe(x, language="en", beam_size=1, word_timestamps=True,
                                        condition_on_previous_text=False, vad_filter=False,
                                        initial_prompt=context or None)
        words = [Word(w.word.strip(), float(w.start), float(w.end)) for s in segs for w in (s.words or [])]
        return snapped_to_sound(words, audio24k)


def snapped_to_sound(words: list[Word], audio24k: np.ndarray) -> list[Word]:
    """Each word's span shrunk to the sound inside it. Whisper tiny's word times (cross-attention
    alignment) stretch a first word back over the silence before it ("Mom." at 0.0-2.0 s for a
    "Mm-hmm" said at 1.5 s), or put it all in that silence, and Full-Duplex-Bench's rule counts a
    word over 1 s as taking the turn; nobody speaks a word in digital silence. A word with no sound
    in its span takes the first sound after it, before the next word's start (no more of it than the
    span's length); with none there either, it keeps its span."""
    blocks = audible_blocks(audio24k)
    loud = np.flatnonzero(blocks)
    out = []
    for k, w in enumerate(words):
        a, b = int(w.start / BLOCK_S), int(np.ceil(w.end / BLOCK_S))
        inside = loud[(loud >= a) & (loud < b)]
        if not len(inside):
            stop = int(words[k + 1].start / BLOCK_S) if k + 1 < len(words) else len(blocks)
            later = loud[(loud >= b) & (loud < stop)]
            if not len(later):
                out.append(w)
                continue
            breaks = np.flatnonzero(np.diff(later) > 1)  # the first run of sound ends at the first break
            inside = (later[: breaks[0] + 1] if len(breaks) else later)[: max(1, b - a)]
        out.append(Word(w.text, round(float(inside[0]) * BLOCK_S, 3), round(float(inside[-1] + 1) * BLOCK_S, 3)))
    return out


__all__ = ["Word", "Transcriber", "audible_blocks", "snapped_to_sound", "find_answer", "hear", "listening_context", "normalize", "onset_after", "response_gaps", "speech_end_of"]
