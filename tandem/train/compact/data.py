"""Synthetic dialogues -> per-frame training arrays for the compact front-end.

Per frame: the user token (what a simulated Listener has transcribed, as a token stream), the VAD
bucket (lagged, noisy), the oracle token (the shared oracle simulator's events, `COMPACT` recipe,
through the run-time `OracleStream` with KAME's policy or the prefix-keep one), and the target
output token from a teacher policy that only uses what the model could have seen: speak the latest
oracle at the pace of the voice, an opener while waiting, a repair and the newer oracle when it is
replaced mid-answer, a fallback when none comes, silence while the user speaks. Each copied target
token also records the frame its oracle token was fed at, which trains the copy pointer.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ...frontends.compact.repair import REPAIR
from ...frontends.compact.streams import UserTokenQueue, vad_bucket
from ...frontends.compact.tokenizer import END, PAD, START, CompactTokenizer
from ..oracles import COMPACT, FPS, dialogue_events, event_frame, feed, schedule
from ...speak.openers import FALLBACKS, OPENERS
from ..synth import Dialogue, Turn, make_dialogue

S_PER_CHAR = 0.05  # faster than hibari (0.068 s/char): the text runs ahead, so the voice gets phrases, not lone words
DECISION_DELAY = 2  # frames after the end of speech at which the teacher starts to speak (160 ms)
LATE_START_P = 0.25  # training only: share of turns whose reply starts late, the frames before it untrained
LATE_START_MAX = 6
TALK_OVER_P = 0.3  # training only: turns after the first spoken over the reply (backchannels, interruptions)  # frames; a live model that let its moment pass must still take the turn, not fall silent
TRAIN_POLICIES = {"kame": 0.5, "prefix": 0.5}
# frames of the user's speech over a reply after which the teacher yields to an interruption: END
# (the model's "I stop": the voice drops what it still had to say) for as long as the user goes on,
# then silence until its answer. END over many frames, not one: greedy decoding would rarely pick a
# single frame's END where the model spreads it over a few. A backchannel
# ("mm-hmm", 0.2-0.6 s) is over by then, and the reply goes on through it (no END)
INTERRUPT_YIELD_FRAMES = 9  # the model learns both ways of feeding newer oracles

# (content ids of an oracle, index j, frame f) -> the latest frame <= f at which content token j of
# that oracle was fed (with everything before it), or None while it has not been fed (by the current
# stream, for `visible`; at any time, for `visible_before`): `OracleFeed`'s two views
Visible = Callable[[list[int], int, int], "int | None"]


def frame_of(t: float) -> int:
    return int(t * FPS)


@dataclass
class TurnInfo:
    end_frame: int
    start_frame: int
    reply_start: int | None = None
    scenario: str = "normal"
    oracle_texts: list[tuple[int, str]] = field(default_factory=list)  # (frame, text) of each oracle event
    delivered: list[str] = field(default_factory=list)  # each event's text as fed (a slow stream loses its tail)
    # the same without a word a cut stream broke off ("About 5" of "About 521 years."): the words it holds whole
    delivered_whole: list[str] = field(default_factory=list)


@dataclass
class Example:
    user: np.ndarray
    vad: np.ndarray
    oracle: np.ndarray
    target: np.ndarray
    speech: np.ndarray  # True where the user is actually speaking (for evaluation)
    turns: list[TurnInfo]
    src: np.ndarray | None = None  # per frame: the frame whose oracle token the target copies, else -1
    policy: str = "kame"
    weight: np.ndarray | None = None  # per frame: 0 where the target must not be trained, else 1


def _partials(rng: random.Random, turn: Turn) -> list[tuple[float, str]]:
    """(time, transcript) updates like the Listener's: every ~0.3 s, lagging, sometimes wrong, then a final."""
    out = []
    t = turn.start + 0.3 + rng.uniform(0.05, 0.15)
    wrong: dict[int, str] = {}
    while t < turn.end + 0.4:
        covered = [w for w in turn.words if w.end <= t - rng.uniform(0.05, 0.15)]
        if covered:
            words = [w.text for w in covered]
            for i in range(len(words)):
                if i in wrong and rng.random() < 0.7:
                    del wrong[i]
                elif i == len(words) - 1 and rng.random() < 0.06:
                    wrong[i] = words[i][: max(1, len(words[i]) // 2)] + rng.choice(["n", "s", "er", "a"])
                if i in wrong:
                    words[i] = wrong[i]
            full = len(covered) == len(turn.words)
            if not full:
                words[-1] = words[-1].rstrip("?.,")
                if rng.random() < 0.12:
                    words[-1] += rng.choice(["...", "?", ".", ","])
            text = " ".join(words)
            out.append((t, text[0].upper() + text[1:]))
        t += 0.3 + rng.uniform(-0.03, 0.08)
    final = " ".join(w.text for w in turn.words)
    out.append((turn.end + rng.uniform(0.47, 0.6), final[0].upper() + final[1:]))
    return out


def _vad(rng: random.Random, d: Dialogue, n: int) -> tuple[np.ndarray, np.ndarray]:
    speech = np.zeros(n, bool)
    for turn in d.turns:
        for a, b in zip(turn.words, turn.words[1:] + [None]):
            end = a.end if b is None or b.start - a.end > 0.12 else b.start
            speech[frame_of(a.start): min(n, frame_of(end) + 1)] = True
    lag = rng.choice([1, 1, 1, 2, 2])
    prob = np.where(speech, rng.uniform(0.8, 0.97), rng.uniform(0.01, 0.08)) + np.random.default_rng(rng.randrange(1 << 30)).normal(0, 0.05, n)
    prob = np.clip(prob, 0, 1)
    noise = np.random.default_rng(rng.randrange(1 << 30)).random(n) < 0.02
    prob[noise] = np.clip(prob[noise] + 0.5 * np.where(speech[noise], -1, 1), 0, 1)
    lagged = np.concatenate([np.full(lag, prob[0]), prob[:-lag]]) if lag else prob
    return lagged.astype(np.float32), speech


class _Teacher:
    """Builds the target tokens for one assistant turn from what was visible frame by frame."""

    def __init__(self, tok: CompactTokenizer, rng: random.Random) -> None:
        self.tok = tok
        self.rng = rng

    def word_frames(self, ids: list[int], i: int) -> int:
        """Frames the word starting at ids[i] occupies in speech."""
        j = i + 1
        while j < len(ids) and not self.tok.starts_word(ids[j]):
            j += 1
        chars = len(self.tok.decode(ids[i:j])) + 1
        return max(j - i, round(chars * S_PER_CHAR * FPS))

    def _word_end(self, plan: list[int], i: int) -> int:
        """Index after the word that plan[i - 1] belongs to (where a switch may happen)."""
        while 0 < i < len(plan) and not self.tok.starts_word(plan[i]):
            i += 1
        return i

    def _seen(self, ids: list[int], f: int, visible: Visible) -> int:
        """How many leading tokens of `ids` the current oracle stream has fed by frame f."""
        n = 0
        while n < len(ids) and visible(ids, n, f) is not None:
            n += 1
        return n

    def run(self, target: np.ndarray, src_out: np.ndarray, start: int, stop: int,
            oracle_at: list[tuple[int, list[int]]], visible: Visible, visible_before: Visible) -> int | None:
        """oracle_at: (reset frame, content ids as appended). Fills target[start:stop] and, for copied
        tokens, src_out with the frame they were fed at; returns the first frame with speech. A content
        token is spoken only once the current oracle stream has fed it (`visible`: fed since the
        stream last restarted; `visible_before`: fed at any time, for the rest of a word already begun).

        A newer oracle that arrives mid-answer is judged only on what the stream has shown of it, as
        the model must: finish the current word, then wait until it either contradicts what was said
        (then "sorry," and the newer one from its start) or has caught up with it in agreement (then
        carry on with its continuation)."""
        tok = self.tok
        plan: list[int] = []
        ostart = 0  # where the followed oracle's content begins in plan
        src: int | None = None
        i = hold = 0
        first = None
        idle_since: int | None = None
        fell_back = False
        for f in range(start, stop):
            latest = max((k for k, (r, ids) in enumerate(oracle_at) if r < f and ids), default=None)
            undecided = False
            if latest is not None and latest != src:
                new = list(oracle_at[latest][1])
                said = plan[ostart:i] if src is not None and i > ostart else []
                if i == 0:
                    plan, ostart, src = new, 0, latest
                elif src is None:
                    cut = self._word_end(plan, i)
                    plan, ostart, src = plan[:cut] + new, cut, latest
                else:
                    seen = self._seen(new, f, visible)
                    clash = next((k for k in range(min(seen, len(said))) if new[k] != said[k]), None)
                    if clash is not None:
                        cut = self._word_end(plan, i)
                        repair = tok.encode(REPAIR)
                        plan, ostart, src = plan[:cut] + repair + new, cut + len(repair), latest
                    elif seen > len(said) or seen == len(new):
                        # agrees with everything said so far: carry on (a repair under way is kept)
                        plan, src = plan[: max(i, ostart)] + new[len(said):], latest
                    else:
                        undecided = True
            if f == start and not plan:
                plan = tok.encode(self.rng.choice(OPENERS))
            if hold > 0:
                hold -= 1
                continue
            if undecided:  # only the rest of the word under way may be said while the newer oracle catches up
                if 0 < i < len(plan) and not tok.starts_word(plan[i]):
                    fed_at = visible_before(oracle_at[src][1], i - ostart, f) if i >= ostart else None
                    self._say(target, src_out, f, plan, i, fed_at)
                    first = f if first is None else first
                    i += 1
                    hold = self._hold_after(plan, i)
                continue
            fed_at = visible(oracle_at[src][1], i - ostart, f) if src is not None and i >= ostart else None
            if i < len(plan) and (src is None or i < ostart or fed_at is not None):
                self._say(target, src_out, f, plan, i, fed_at)
                first = f if first is None else first
                i += 1
                hold = self._hold_after(plan, i)
                idle_since = None
                continue
            if src is None and not fell_back:
                idle_since = f if idle_since is None else idle_since
                if f - idle_since > 2.5 * FPS:
                    plan += tok.encode(self.rng.choice(FALLBACKS))
                    fell_back = True
        return first

    @staticmethod
    def _say(target: np.ndarray, src_out: np.ndarray, f: int, plan: list[int], i: int, fed_at: int | None) -> None:
        target[f] = plan[i]
        if fed_at is not None:
            src_out[f] = fed_at

    def _hold_after(self, plan: list[int], i: int) -> int:
        """PAD frames after plan[i - 1] when it ends a word: the rest of the word's spoken length."""
        if i < len(plan) and not self.tok.starts_word(plan[i]):
            return 0
        w0 = i - 1
        while w0 > 0 and not self.tok.starts_word(plan[w0]):
            w0 -= 1
        return max(0, self.word_frames(plan, w0) - (i - w0))


def whole_words(tok: CompactTokenizer, ids: list[int], before_cut: list[int] | None) -> list[int]:
    """`ids` without the pieces of a word the cut broke off (when the piece after the cut goes on the word)."""
    if before_cut is None or len(ids) >= len(before_cut) or tok.starts_word(before_cut[len(ids)]):
        return ids
    i = len(ids)
    while i > 0 and not tok.starts_word(ids[i - 1]):
        i -= 1
    return ids[: max(0, i - 1)]


def build_compact_example(rng: random.Random, tok: CompactTokenizer, heldout: bool = False,
                          dialogue: Dialogue | None = None, scenario: str | None = None, max_frames: int = 480,
                          policy: str | None = None, late_start_p: float = 0.0,
                          late_first_oracle_p: float = 0.0, talk_over_p: float = 0.0) -> Example:
    """One training example of the compact recipe. `late_start_p`: the share of turns whose reply
    starts 1..LATE_START_MAX frames after the usual decision frame, with the silent frames in between
    left out of the loss. The teacher always starts on time, so without these a model that once
    stays silent a frame too long has never seen that state, and it then stays silent for the whole
    turn. `late_first_oracle_p`: the share of turns whose first oracle comes as late as on the real
    stack (an evaluation variant; training on 60% of such turns did not help, docs/COMPACT.md).

    The order of the random draws (dialogue, policy, VAD, partials, oracle events, cut streams,
    teacher) is the recipe's data: the shipped checkpoint was trained and is evaluated on it."""
    d = dialogue or make_dialogue(rng, heldout, talk_over_p=talk_over_p)
    policy = policy or rng.choices(list(TRAIN_POLICIES), weights=list(TRAIN_POLICIES.values()))[0]
    n = min(max_frames, int(math.ceil(d.duration * FPS)) + 1)
    vad, speech = _vad(rng, d, n)
    updates = sorted((frame_of(t) + 1, text) for turn in d.turns for t, text in _partials(rng, turn))
    recipe = replace(COMPACT, late_first_p=late_first_oracle_p)
    per_turn = dialogue_events(rng, d.turns, recipe, heldout, scenario)
    infos = [TurnInfo(end_frame=frame_of(turn.end), start_frame=frame_of(turn.start), scenario=to.scenario,
                      oracle_texts=[(event_frame(e.t), e.text) for e in to.events])
             for turn, to in zip(d.turns, per_turn)]
    fed = feed(rng, schedule(per_turn), n, tok.encode, START, PAD, policy, recipe.cut_p)
    for ev in fed.events:
        infos[ev.turn].delivered.append(tok.decode(ev.ids))
        infos[ev.turn].delivered_whole.append(tok.decode(whole_words(tok, ev.ids, ev.whole)))
    user = _user_tokens(tok, updates, n)

    src = np.full(n, -1, np.int64)
    target = np.full(n, PAD, np.int64)
    weight = np.ones(n, np.float32)
    teacher = _Teacher(tok, rng)
    for ti, info in enumerate(infos):
        if d.turns[ti].kind == "backchannel":
            continue  # nothing to answer: the reply it was said over goes on
        start = info.end_frame + DECISION_DELAY
        nxt = next((k for k in range(ti + 1, len(infos)) if d.turns[k].kind != "backchannel"), None)
        # the user speaks again: stop (after a while if they talk over the reply: it might be a backchannel)
        stop = n if nxt is None else infos[nxt].start_frame + (INTERRUPT_YIELD_FRAMES if d.turns[nxt].over else 0)
        if late_start_p and rng.random() < late_start_p:
            late = min(rng.randint(1, LATE_START_MAX), max(0, min(stop, n) - start - 1))
            weight[start:start + late] = 0.0
            start += late
        if start >= n:
            continue
        vis = [(ev.frame, ev.ids) for ev in fed.events if ev.turn == ti]
        info.reply_start = teacher.run(target, src, start, min(stop, n), vis, fed.visible, fed.visible_before)
        if nxt is not None and d.turns[nxt].over and stop < n:
            target[stop: min(n, infos[nxt].end_frame + 1)] = END  # yielded while the user goes on
    return Example(user, vad.astype(np.float32), fed.tokens, target, speech, infos, src, policy, weight)


def _user_tokens(tok: CompactTokenizer, updates: list[tuple[int, str]], n: int) -> np.ndarray:
    """[n, 2] user tokens: the transcript updates (frame, text) through the run-time UserTokenQueue."""
    user = np.full((n, 2), PAD, np.int64)
    q = UserTokenQueue(tok.encode, PAD)
    up_i = 0
    for f in range(n):
        while up_i < len(updates) and updates[up_i][0] <= f:
            q.update(updates[up_i][1])
            up_i += 1
        user[f] = q.next()
    return user

def vad_buckets(vad: np.ndarray) -> np.ndarray:
    return np.array([vad_bucket(float(p)) for p in vad], np.int64)
