"""The one oracle simulator for every front-end's training data: KAME's fine-tuning recipe
(REFERENCE 1.3) as one pipeline, with this project's extensions of it as parameters.

1. Per user turn (`turn_events`): once `min_words` words were spoken, an event every `period_s` of
   the turn. Its text depends on the share of the turn heard: up to half, a guess without knowledge
   (another dialogue's reply); above, a prediction helped by a hidden hint of the true reply, right
   with a chance that grows with the share heard (KAME's five hint tiers, or a linear ramp), else
   the true reply with its key entity replaced (the right shape with the wrong fact, which is what
   a weak predictor gets wrong). KAME ran a small LLM for these predictions; nothing like it runs
   here, so they are drawn from the synthetic dialogue generator. The "random oracle" variant uses
   other replies for every intermediate event. Each intermediate event is skipped with a per-turn
   probability drawn from U(0.1, 0.7); the last one, from the final transcript, never is.
2. Delays: an event may come an LLM's latency after its check, the last one after the Listener's
   final transcript (KAME's recipe puts it at the end of the turn).
3. Scenarios (`SCENARIOS`) twist the last event: normal, late, replaced by a wrong one then the
   true one, never, early only.
4. Shifts: each event moved right 1-10 or left 1-15 frames (KAME: every event, by whole frames;
   the compact recipe: 40% of events, by any amount in the same ranges).
5. `schedule`: an event at time t lands on frame `int(t * 12.5) + 1 + text_delay`.
6. `feed`: the frames go through the run-time `OracleStream` with a run-time policy, so training and
   inference share one definition of what the stream holds; a share of streams are slow or cut off
   (their second half never arrives). The result also records when each token was fed, which is
   the teacher's causal view (`OracleFeed.visible`): what a model could have seen by each frame.

`KAME` is the Moshi recipe (the published one); `COMPACT` the compact front-end's. The order of the
random draws is part of the compact recipe's data (the shipped checkpoint was trained and is
evaluated on it): a change here that moves a draw changes that data.
"""
from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..think.oracle import OracleStream, make_policy
from .synth import Turn, opening_of, other_reply, wrong_version

FPS = 12.5
TIER_THRESHOLDS = (0.5, 0.65, 0.8, 0.95, 0.99)  # a share heard above the k-th threshold is tier k + 1
HINT_P_TRUE = (0.0, 0.2, 0.4, 0.6, 0.8, 0.95)  # tier -> chance the simulated prediction is the true reply
FINAL_TIER = len(TIER_THRESHOLDS) + 1  # the event from the final transcript
OTHER_TIER = -1  # the random variant: another dialogue's reply
REAL_FIRST_ORACLE_S = (1.05, 1.6)  # seconds after the user starts (27 dev questions: median 1.33 s)
SCENARIOS = ("normal", "late", "replaced", "never", "early_only", "opening")
Range = tuple[float, float]


@dataclass(frozen=True)
class OracleRecipe:
    period_s: float = 0.5
    min_words: int = 2
    hint: str = "tiers"  # "tiers": KAME's five hint strengths; "ramp": 0.3 rising to 0.9 over the second half
    random_variant_p: float = 0.3  # dialogues whose intermediate oracles are all other dialogues' replies
    skip_range: Range = (0.1, 0.7)
    llm_latency_s: Range | None = None  # from a check to the oracle's first token
    final_after_s: Range | None = None  # from the end of speech to the final transcript
    scenarios: dict[str, float] = field(default_factory=lambda: {"normal": 1.0})  # name -> weight
    shift_right: tuple[int, int] = (1, 10)  # frames
    shift_left: tuple[int, int] = (1, 15)
    shift_weights: tuple[int, int, int] = (0, 1, 1)  # unshifted, right, left: the odds of each
    whole_frames: bool = True  # shift by whole frames (KAME) or by any time in the same ranges
    not_before_start_s: float | None = None  # no event earlier than this after the turn starts
    cut_p: float = 0.0  # slow or cut-off streams: the share of oracles whose second half never arrives
    late_first_p: float = 0.0  # turns whose first oracle comes as late as on the real stack
    text_delay: int = 0  # frames the text stream is delayed by in the training arrays
    augment: bool = True  # skips and shifts


KAME = OracleRecipe()
COMPACT = OracleRecipe(
    hint="ramp", random_variant_p=0.0, llm_latency_s=(0.08, 0.35), final_after_s=(0.47, 0.6),
    scenarios={"normal": 0.45, "late": 0.12, "replaced": 0.13, "never": 0.08, "early_only": 0.10, "opening": 0.12},
    shift_weights=(3, 1, 1), whole_frames=False, not_before_start_s=0.2, cut_p=0.1)


@dataclass(frozen=True)
class OracleEvent:
    t: float  # seconds from the dialogue's start
    text: str
    tier: int  # OTHER_TIER, 0 no hint, 1-5 hint strength, FINAL_TIER from the final transcript


@dataclass
class TurnOracles:
    scenario: str
    events: list[OracleEvent]  # in time order


def hint_tier(frac: float) -> int:
    """0 for at most half the turn heard, then 1-5 by KAME's thresholds."""
    return sum(frac > th for th in TIER_THRESHOLDS)


def _draw(rng: random.Random, r: Range | None) -> float:
    return rng.uniform(*r) if r else 0.0


def _prediction(rng: random.Random, turn: Turn, frac: float, recipe: OracleRecipe, heldout: bool,
                random_variant: bool) -> OracleEvent:
    """The text of an intermediate event with `frac` of the turn heard (its time is set by the caller)."""
    if random_variant:
        return OracleEvent(0.0, other_reply(rng, heldout), OTHER_TIER)
    tier = hint_tier(frac)
    if tier == 0:
        return OracleEvent(0.0, other_reply(rng, heldout), 0)
    p_true = 0.3 + 0.6 * (frac - 0.5) / 0.5 if recipe.hint == "ramp" else HINT_P_TRUE[tier]
    text = turn.reply if rng.random() < p_true else wrong_version(rng, turn.reply, heldout)
    return OracleEvent(0.0, text, tier)


def _shift(rng: random.Random, recipe: OracleRecipe) -> float:
    """Seconds to move an event by: right, left or not at all, by the recipe's odds."""
    if recipe.whole_frames:
        right, left = rng.randint(*recipe.shift_right) / FPS, rng.randint(*recipe.shift_left) / FPS
    else:
        right = rng.uniform(recipe.shift_right[0] / FPS, recipe.shift_right[1] / FPS)
        left = rng.uniform(recipe.shift_left[0] / FPS, recipe.shift_left[1] / FPS)
    still, r, l = recipe.shift_weights
    return rng.choice([0.0] * still + [right] * r + [-left] * l)


def turn_events(rng: random.Random, turn: Turn, recipe: OracleRecipe = KAME, heldout: bool = False,
                scenario: str = "normal", random_variant: bool = False) -> list[OracleEvent]:
    """The oracle events of one user turn, in time order, skipped and shifted unless `recipe.augment`
    is off."""
    if scenario == "never":
        return []
    dur = max(0.3, turn.end - turn.start)
    t = turn.words[min(recipe.min_words, len(turn.words)) - 1].end
    if recipe.late_first_p and rng.random() < recipe.late_first_p:
        # as measured on the real stack: the Listener's first partial of two words, then the LLM's
        # first token, about 1.3 s after the user starts, however short the question (so a short
        # one may end with no oracle yet)
        t = max(t, turn.start + rng.uniform(*REAL_FIRST_ORACLE_S))
    skip_p = rng.uniform(*recipe.skip_range) if recipe.augment else 0.0
    ev: list[OracleEvent] = []
    while t < turn.end:
        guess = _prediction(rng, turn, (t - turn.start) / dur, recipe, heldout, random_variant)
        if not recipe.augment or rng.random() > skip_p:
            ev.append(replace(guess, t=t + _draw(rng, recipe.llm_latency_s)))
        t += recipe.period_s
    final_t = turn.end + _draw(rng, recipe.final_after_s) + _draw(rng, recipe.llm_latency_s)
    if scenario == "normal":
        ev.append(OracleEvent(final_t, turn.reply, FINAL_TIER))
    elif scenario == "early_only":  # the partial-based oracle was right; the final one never came
        ev.append(OracleEvent(turn.end - rng.uniform(0.0, 0.3), turn.reply, FINAL_TIER))
    elif scenario == "late":
        ev = [e for e in ev if e.text != turn.reply]
        ev.append(OracleEvent(final_t + rng.uniform(0.8, 2.5), turn.reply, FINAL_TIER))
    elif scenario == "replaced":  # a wrong answer from the final transcript, then the right one
        ev.append(OracleEvent(final_t, wrong_version(rng, turn.reply, heldout), FINAL_TIER))
        ev.append(OracleEvent(final_t + rng.uniform(0.5, 2.0), turn.reply, FINAL_TIER))
    elif scenario == "opening":  # the back-end's restated opening at the end of speech, the reply later
        opening = opening_of(turn)
        if opening is not None:
            ev.append(OracleEvent(turn.end + rng.uniform(-0.3, 0.1), opening, FINAL_TIER))
        ev.append(OracleEvent(final_t + rng.uniform(0.3, 2.0), turn.reply, FINAL_TIER))
    else:
        raise ValueError(f"unknown oracle scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    return shift_events(rng, ev, turn, recipe) if recipe.augment else ev


def shift_events(rng: random.Random, events: list[OracleEvent], turn: Turn, recipe: OracleRecipe = KAME
                 ) -> list[OracleEvent]:
    """Each event moved right, left or not at all (`_shift`), never earlier than `not_before_start_s`
    into the turn; in time order."""
    floor = -math.inf if recipe.not_before_start_s is None else turn.start + recipe.not_before_start_s
    shifted = [replace(e, t=max(floor, e.t + _shift(rng, recipe))) for e in events]
    shifted.sort(key=lambda e: e.t)
    return shifted


def choose_scenario(rng: random.Random, recipe: OracleRecipe) -> str:
    names = list(recipe.scenarios)
    if len(names) == 1:
        return names[0]
    return rng.choices(names, weights=list(recipe.scenarios.values()))[0]


def dialogue_events(rng: random.Random, turns: list[Turn], recipe: OracleRecipe = KAME, heldout: bool = False,
                    scenario: str | None = None) -> list[TurnOracles]:
    """Each turn's scenario (`scenario`, else drawn by the recipe's weights) and events."""
    random_variant = bool(recipe.random_variant_p) and rng.random() < recipe.random_variant_p
    out = []
    for turn in turns:
        if turn.kind == "backchannel":  # the back-end starts no oracle for a backchannel
            out.append(TurnOracles("backchannel", []))
            continue
        sc = scenario or choose_scenario(rng, recipe)
        out.append(TurnOracles(sc, turn_events(rng, turn, recipe, heldout, sc, random_variant)))
    return out


def event_frame(t: float, text_delay: int = 0) -> int:
    return max(0, int(t * FPS) + 1 + text_delay)


def schedule(turns: list[TurnOracles], text_delay: int = 0) -> list[tuple[int, str, int]]:
    """(frame, text, turn index) of every event, in the order the stream gets them: by frame, then
    by text (in one frame the last one fed replaces the others)."""
    return sorted((event_frame(e.t, text_delay), e.text, ti) for ti, to in enumerate(turns) for e in to.events)


@dataclass
class FedOracle:
    frame: int  # the frame its reset and tokens reached the stream
    turn: int
    ids: list[int]  # as appended: a cut-off stream's first half only
    whole: list[int] | None = None  # the oracle before a cut (None: not cut)


@dataclass
class OracleFeed:
    """The oracle stream over a dialogue and when it fed what."""

    tokens: np.ndarray  # the token fed at each frame
    events: list[FedOracle]
    start_id: int
    fed_at: dict[tuple[int, ...], list[int]]  # stream prefix ending in a fed token -> frames it was fed
    restarts: list[int]  # frames where the stream fed its start token

    def visible_before(self, ids: list[int], j: int, f: int) -> int | None:
        """The latest frame <= f at which content token j of an oracle with content `ids` was fed,
        with everything before it, at any time; None while it has not been."""
        frames = self.fed_at.get((self.start_id, *ids[: j + 1]))
        if not frames:
            return None
        k = bisect.bisect_right(frames, f)
        return frames[k - 1] if k else None

    def visible(self, ids: list[int], j: int, f: int) -> int | None:
        """The same, fed since the stream last restarted: after a restart a model cannot know that the
        newer oracle repeats what the older one fed until it has been fed again."""
        g = self.visible_before(ids, j, f)
        k = bisect.bisect_right(self.restarts, f)
        return g if g is not None and (not k or g >= self.restarts[k - 1]) else None


def feed(rng: random.Random, plan: list[tuple[int, str, int]], n: int, encode: Callable[[str], list[int]],
         start_id: int, pad_id: int, policy: str = "kame", cut_p: float = 0.0) -> OracleFeed:
    """`plan` (from `schedule`) through the run-time OracleStream over n frames: at an event's frame
    a reset and its tokens (a share `cut_p` of them cut to their first half), one token per frame."""
    stream = OracleStream(start_id, pad_id, make_policy(policy))
    tokens = np.full(n, pad_id, np.int64)
    fed_at: dict[tuple[int, ...], list[int]] = {}
    events: list[FedOracle] = []
    j = 0
    for f in range(n):
        while j < len(plan) and plan[j][0] <= f:
            _, text, ti = plan[j]
            ids = encode(text)
            stream.reset(f)
            whole = None
            if cut_p and rng.random() < cut_p:  # a slow or cut-off LLM stream: the tail never makes it
                whole, ids = ids, ids[: len(ids) // 2]
            stream.append(ids, f)
            events.append(FedOracle(f, ti, ids, whole))
            j += 1
        before = stream.buf.fed
        tokens[f] = stream.token(f)
        if stream.buf.fed > before:
            fed_at.setdefault(tuple(stream.buf.tokens[: stream.buf.last_index + 1]), []).append(f)
    restarts = np.flatnonzero(tokens == start_id).tolist()
    return OracleFeed(tokens, events, start_id, fed_at, restarts)


def dialogue_oracles(rng: random.Random, turns: list[Turn], n: int, encode: Callable[[str], list[int]],
                     start_id: int, pad_id: int, recipe: OracleRecipe = KAME, heldout: bool = False
                     ) -> tuple[np.ndarray, list[tuple[int, str, int]]]:
    """The oracle stream over n frames of a whole dialogue (KAME's policy, as KAME's front-end
    hears it), and the scheduled events (for inspection)."""
    plan = schedule(dialogue_events(rng, turns, recipe, heldout), recipe.text_delay)
    return feed(rng, plan, n, encode, start_id, pad_id, "kame", recipe.cut_p).tokens, plan
