"""Simulated oracles with KAME's fine-tuning recipe (REFERENCE 1.3), for any front-end's training data.

Per user turn: once 2+ words were spoken, an oracle event every 0.5 s of the turn. Its text depends
on how much of the turn was heard (the fraction of the turn's duration): up to 0.5 no hint, a guess
without knowledge; above, a prediction helped by a hidden hint of the true reply in five strengths
(tier thresholds 0.65, 0.8, 0.95, 0.99). At the end of the turn the oracle is the true reply. The
cheaper "random oracle" variant uses replies from other dialogues for every intermediate event and
the true reply last.

KAME ran a small LLM for the predictions; nothing like it runs here, so a prediction is simulated
from the synthetic dialogue generator: a guess is another dialogue's reply, a hinted prediction is
the true reply with a probability that grows with the hint's strength, else the true reply with its
key entity replaced (right shape, wrong fact), which is what a weak predictor gets wrong.

Events become columns of the training arrays at `int(t * 12.5) + 1 + text_delay`; each event is
then shifted right by 1-10 or left by 1-15 columns, and skipped with a per-sample probability drawn
from U(0.1, 0.7), never the last. The columns are filled through the run-time `OracleStream` with
KAME's policy, so training and inference share one definition of what the stream holds.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..oracle import KamePolicy, OracleStream
from .synth import Turn, other_reply, wrong_version

FPS = 12.5
TIER_THRESHOLDS = (0.5, 0.65, 0.8, 0.95, 0.99)  # a fraction above the k-th threshold is tier k + 1
HINT_P_TRUE = (0.0, 0.2, 0.4, 0.6, 0.8, 0.95)  # tier -> chance the simulated prediction is the true reply


@dataclass(frozen=True)
class OracleRecipe:
    period_s: float = 0.5
    min_words: int = 2
    text_delay: int = 0  # columns the text stream is delayed by in the training arrays
    shift_right: tuple[int, int] = (1, 10)
    shift_left: tuple[int, int] = (1, 15)
    skip_range: tuple[float, float] = (0.1, 0.7)
    random_variant_p: float = 0.3  # dialogues that use the cheaper other-replies variant
    augment: bool = True


@dataclass
class OracleEvent:
    t: float  # seconds from the dialogue's start
    text: str
    tier: int  # 0 no hint, 1-5 hint strength, 6 the true reply at the end of the turn (-1: random variant)


def hint_tier(frac: float) -> int:
    """0 for at most half the turn heard, then 1-5 by KAME's thresholds."""
    return sum(frac > th for th in TIER_THRESHOLDS)


def turn_events(rng: random.Random, turn: Turn, recipe: OracleRecipe = OracleRecipe(), heldout: bool = False,
                random_variant: bool = False) -> list[OracleEvent]:
    dur = max(1e-3, turn.end - turn.start)
    out: list[OracleEvent] = []
    if len(turn.words) >= recipe.min_words:
        t = turn.words[recipe.min_words - 1].end
        while t < turn.end:
            if random_variant:
                out.append(OracleEvent(t, other_reply(rng, heldout), -1))
            else:
                tier = hint_tier((t - turn.start) / dur)
                if tier == 0:
                    text = other_reply(rng, heldout)
                elif rng.random() < HINT_P_TRUE[tier]:
                    text = turn.reply
                else:
                    text = wrong_version(rng, turn.reply, heldout)
                out.append(OracleEvent(t, text, tier))
            t += recipe.period_s
    out.append(OracleEvent(turn.end, turn.reply, len(TIER_THRESHOLDS) + 1))
    return out


def event_column(t: float, text_delay: int = 0) -> int:
    return int(t * FPS) + 1 + text_delay


def place_events(rng: random.Random, events: list[OracleEvent], recipe: OracleRecipe = OracleRecipe()
                 ) -> list[tuple[int, str]]:
    """(column, text) per surviving event, in column order (a later event replaces an earlier one)."""
    skip_p = rng.uniform(*recipe.skip_range) if recipe.augment else 0.0
    placed = []
    for i, ev in enumerate(events):
        col = event_column(ev.t, recipe.text_delay)
        if recipe.augment:
            if i < len(events) - 1 and rng.random() < skip_p:
                continue  # never the last: the true reply always arrives
            col += rng.randint(*recipe.shift_right) if rng.random() < 0.5 else -rng.randint(*recipe.shift_left)
        placed.append((max(0, col), i, ev.text))
    placed.sort()
    return [(c, text) for c, _, text in placed]


def oracle_columns(placed: list[tuple[int, str]], n: int, encode: Callable[[str], list[int]], start_id: int,
                   pad_id: int) -> np.ndarray:
    """The oracle stream over n columns: the start token at each event's column, then one token per
    column, PAD elsewhere; computed by the run-time OracleStream (KAME policy)."""
    stream = OracleStream(start_id, pad_id, KamePolicy())
    out = np.full(n, pad_id, np.int64)
    j = 0
    for c in range(n):
        while j < len(placed) and placed[j][0] <= c:
            stream.reset(c)
            stream.append(encode(placed[j][1]), c)
            j += 1
        out[c] = stream.token(c)
    return out


def dialogue_oracles(rng: random.Random, turns: list[Turn], n: int, encode: Callable[[str], list[int]],
                     start_id: int, pad_id: int, recipe: OracleRecipe = OracleRecipe(), heldout: bool = False
                     ) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """The oracle column array for a whole dialogue, and the placed events (for inspection)."""
    random_variant = rng.random() < recipe.random_variant_p
    placed: list[tuple[int, str]] = []
    for turn in turns:
        placed += place_events(rng, turn_events(rng, turn, recipe, heldout, random_variant), recipe)
    placed.sort(key=lambda x: x[0])
    return oracle_columns(placed, n, encode, start_id, pad_id), placed
