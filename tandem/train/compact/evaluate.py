"""Behaviour of the compact front-end on held-out synthetic dialogues, decoded frame by frame with
its own outputs fed back (no teacher forcing): the figures docs/COMPACT.md reports."""
from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass

import numpy as np
import torch

from ...bench.copying import copied_exactly
from ...frontends.compact.decoding import DecodeRules, FrameInput, step
from ...frontends.compact.model import CompactLM
from ...frontends.compact.tokenizer import END, PAD, CompactTokenizer
from ...think.oracle import DEFAULT_POLICY
from ..synth import make_dialogue, opening_of
from .data import DECISION_DELAY, Example, build_compact_example

ONSET_FRAMES = 4
MISSED_FRAMES = DECISION_DELAY + 3  # frames after the end of speech held silent to test a missed turn


def run_greedy(model: CompactLM, tok: CompactTokenizer, ex: Example, oracle_on: bool = True,
               silent: range = range(0), rules: DecodeRules = DecodeRules()) -> np.ndarray:
    """Decode one example in streaming mode through the front-end's own `decoding.step` (greedy, with
    `TurnStart` and the loop guard); returns the output token per frame. Frames in `silent` are
    forced to PAD, as if the model had chosen silence there."""
    cache = model.new_state(1)
    state = rules.state(tok, lambda text: [])  # the example's user stream is already tokenised
    state.commit = None  # a synthetic dialogue's oracle is the answer to its turn: nothing is left to settle
    out = np.zeros(len(ex.target), np.int64)
    for f in range(len(ex.target)):
        o = int(ex.oracle[f]) if oracle_on else PAD
        x = FrameInput((int(ex.user[f][0]), int(ex.user[f][1])), float(ex.vad[f]), o, PAD if f in silent else None)
        out[f] = step(model, cache, [0], [state], [x])[0]
    return out


def recovers_from_a_missed_turn(model: CompactLM, tok: CompactTokenizer, ex: Example,
                                rules: DecodeRules = DecodeRules()) -> bool:
    """With its first MISSED_FRAMES frames after the end of speech forced silent (a live model that
    let its moment pass, as greedy decoding on real input sometimes does), does it still take the
    turn within ONSET_FRAMES frames after that? A model that never saw itself late goes silent."""
    end = ex.turns[0].end_frame
    out = run_greedy(model, tok, ex, True, silent=range(end + 1, end + 1 + MISSED_FRAMES), rules=rules)
    after = out[end + 1 + MISSED_FRAMES: end + 1 + MISSED_FRAMES + ONSET_FRAMES]
    return bool(np.any(after > END))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _answer_frames(tok: CompactTokenizer, window: np.ndarray, answer: str) -> int | None:
    """Frames into `window` (the reply's frames after the end of speech) until every word of `answer`
    was said (a word said in part does not count: its pieces decode to another word)."""
    want = _words(answer)
    for k in range(len(window)):
        if window[k] > END and all(w in _words(tok.decode([int(t) for t in window[: k + 1] if t > END])) for w in want):
            return k + 1
    return None


@dataclass
class TurnResult:
    scenario: str
    onset_frames: int | None
    talk_over_frames: int
    speech_frames: int
    said: str
    answer: str | None
    answer_said: bool
    stopped: bool
    answer_delivered: bool  # the turn's last oracle, as fed, holds the answer (a cut-off stream may not)
    copy_exact: bool | None = None  # the last oracle's names and numbers said exactly (None: it had none)
    answer_frames: int | None = None  # frames after the end of speech until the answer's words were all said


def evaluate_example(model: CompactLM, tok: CompactTokenizer, ex: Example, answers: list[str | None],
                     oracle_on: bool = True, rules: DecodeRules = DecodeRules()) -> list[TurnResult]:
    out = run_greedy(model, tok, ex, oracle_on, rules=rules)
    speaking = out > END
    results = []
    for ti, info in enumerate(ex.turns):
        nxt = ex.turns[ti + 1].start_frame if ti + 1 < len(ex.turns) else len(out)
        lo = ex.turns[ti - 1].end_frame + 1 if ti > 0 else 0
        # user-speech frames of this turn (from the end of the previous reply window to the end of this turn)
        sp = ex.speech[lo: info.end_frame + 1]
        talk = int(np.sum(speaking[lo: info.end_frame + 1] & sp))
        window = out[info.end_frame + 1: nxt]
        idx = np.flatnonzero(window > END)
        onset = int(idx[0]) + 1 if len(idx) else None
        said = tok.decode([int(t) for t in window if t > END])
        ans = answers[ti]
        answer_said = bool(ans) and all(w in _words(said) for w in _words(ans))
        delivered = bool(ans) and bool(info.delivered) and all(w in _words(info.delivered[-1]) for w in _words(ans))
        tail = window[-int(1.5 * 12.5):] if len(window) > 40 else np.zeros(0)
        stopped = not np.any(tail > END)
        # judged on the words the last oracle held whole: a cut stream's broken-off word is no word to copy
        exact = copied_exactly(said, info.delivered_whole[-1]) if oracle_on and info.delivered else None
        results.append(TurnResult(info.scenario, onset, talk, int(sp.sum()), said, ans, answer_said, stopped, delivered,
                                  exact, _answer_frames(tok, window, ans) if answer_said else None))
    return results


def evaluate(model: CompactLM, tok: CompactTokenizer, n: int = 200, seed: int = 99, progress: bool = False,
             policy: str = DEFAULT_POLICY, late_first_oracle_p: float = 0.0, rules: DecodeRules = DecodeRules()) -> dict:
    """`late_first_oracle_p`: the share of turns whose first oracle comes as late as on the real
    stack (about 1.3 s after the user starts), a harder variant of the held-out set. `rules`: the
    decoding rules over the model's choices (`decoding.DecodeRules`), all on as in the front-end."""
    from tqdm import tqdm

    rng = random.Random(seed)
    rows: dict[str, list[TurnResult]] = {"normal": [], "replaced": [], "never": [], "opening": [], "all": []}
    recovered: list[bool] = []
    for scenario, count, oracle_on in (("normal", n, True), ("replaced", max(20, n // 2), True), ("never", max(20, n // 4), False),
                                        ("opening", max(20, n // 2), True)):
        for _ in tqdm(range(count), desc=f"eval {scenario}", disable=not progress):
            d = make_dialogue(rng, heldout=True, n_turns=1)
            while scenario == "opening" and opening_of(d.turns[0]) is None:  # only replies with an opening
                d = make_dialogue(rng, heldout=True, n_turns=1)
            ex = build_compact_example(rng, tok, heldout=True, dialogue=d, scenario=scenario, policy=policy,
                                       late_first_oracle_p=late_first_oracle_p)
            res = evaluate_example(model, tok, ex, [t.answer for t in d.turns], oracle_on, rules)
            rows[scenario] += res
            if scenario != "opening":  # the figures kept from before it was added stay comparable
                rows["all"] += res
            if scenario == "normal":
                recovered.append(recovers_from_a_missed_turn(model, tok, ex, rules))
    talk = {kind: [talk_over_result(model, tok, rng, kind, policy, rules) for _ in range(max(10, n // 8))]
            for kind in ("backchannel", "interruption")}
    allr = rows["all"]
    onset = [r.onset_frames for r in allr]
    never = rows["never"]

    def answer_pct(rs: list[TurnResult], delivered_only: bool) -> float | None:
        rs = [r for r in rs if r.answer and (r.answer_delivered or not delivered_only)]
        return round(100 * np.mean([r.answer_said for r in rs]), 1) if rs else None
    return {
        "oracle_policy": policy,
        "word_cursor": rules.word_cursor,
        "repair": rules.repair,
        "late_first_oracle_p": late_first_oracle_p,
        "turns": len(allr),
        "talk_over_pct": round(100 * sum(r.talk_over_frames for r in allr) / max(1, sum(r.speech_frames for r in allr)), 2),
        "onset_within_4_frames_pct": round(100 * np.mean([o is not None and o <= ONSET_FRAMES for o in onset]), 1),
        "onset_median_frames": float(np.median([o for o in onset if o is not None])) if any(o is not None for o in onset) else None,
        # over turns whose oracle, as fed, held the answer: a stream cut off before the answer (10% of
        # oracles lose their tail) leaves nothing to say; the *_all_turns figures count those too
        "oracle_answer_pct": answer_pct(rows["normal"], True),
        "oracle_answer_all_turns_pct": answer_pct(rows["normal"], False),
        # how soon: frames after the end of speech until the answer was said whole (normal turns that said it)
        "answer_frames_median": _median_or_none([r.answer_frames for r in rows["normal"] if r.answer_frames is not None]),
        "replaced_newer_answer_pct": answer_pct(rows["replaced"], True),
        "replaced_newer_answer_all_turns_pct": answer_pct(rows["replaced"], False),
        # the last oracle's names and numbers, as fed, said as whole words in order (tandem/bench/copying.py)
        "copy_exact_pct": _pct([r.copy_exact for r in rows["normal"] + rows["replaced"] if r.copy_exact is not None]),
        "copy_exact_turns": sum(r.copy_exact is not None for r in rows["normal"] + rows["replaced"]),
        "answer_cut_off_turns": sum(bool(r.answer) and not r.answer_delivered for r in rows["normal"] + rows["replaced"]),
        # the back-end's restated opening first ("The capital of Xa is"), the whole reply 0.3-2 s after
        # the final: the answer said, with no repair, and the opening's time to the first word
        "opening_answer_pct": answer_pct(rows["opening"], True),
        "opening_repaired_pct": _pct([" sorry" in f" {r.said.lower()}" for r in rows["opening"]]),
        "opening_onset_within_4_frames_pct": _pct([r.onset_frames is not None and r.onset_frames <= ONSET_FRAMES
                                                   for r in rows["opening"]]),
        # a second turn spoken over the reply to the first: a backchannel must not stop it, an
        # interruption must, and then be answered (`talk_over_result`)
        "backchannel_talked_through_pct": _pct([r["went_on"] for r in talk["backchannel"]]),
        "interruption_yielded_pct": _pct([r["stopped"] for r in talk["interruption"]]),
        "interruption_yield_frames_median": _median_or_none([r["stop_frames"] for r in talk["interruption"]]),
        "interruption_answered_pct": _pct([r["answered"] for r in talk["interruption"]]),
        "talk_over_dialogues": sum(len(rs) for rs in talk.values()),
        "no_oracle_nonempty_pct": round(100 * np.mean([bool(r.said.strip()) for r in never]), 1),
        "no_oracle_stops_pct": round(100 * np.mean([r.stopped for r in never]), 1),
        "no_oracle_median_words": float(np.median([len(r.said.split()) for r in never])),
        "missed_turn_recovery_pct": round(100 * np.mean(recovered), 1) if recovered else None,
        "examples": [{"scenario": r.scenario, "said": r.said, "answer": r.answer, "onset_frames": r.onset_frames}
                     for r in (rows["normal"][:3] + rows["replaced"][:3] + never[:3])],
    }


def talk_over_result(model: CompactLM, tok: CompactTokenizer, rng: random.Random, kind: str, policy: str,
                     rules: DecodeRules = DecodeRules()) -> dict:
    """A held-out dialogue of two turns, the second spoken over the reply to the first (`kind`:
    "backchannel" or "interruption"), decoded greedily. The model yields by saying END (the voice
    then drops what it still had to say): did it not yield to a backchannel (no END from its onset
    to 12 frames after its end), did it yield to an interruption (how many frames after its
    onset), and answer it (a word within 12 frames of its end)?"""
    d = make_dialogue(rng, heldout=True, n_turns=2, talk_over_p=1.0, talk_over_kind=kind)
    ex = build_compact_example(rng, tok, heldout=True, dialogue=d, scenario="normal", policy=policy)
    out = run_greedy(model, tok, ex, True, rules=rules)
    words = out > END
    on, end = ex.turns[1].start_frame, ex.turns[1].end_frame
    yields = np.flatnonzero(out[on: end + 1] == END)
    return {"went_on": not len(np.flatnonzero(out[on: end + 12] == END)),
            "stopped": bool(len(yields)), "stop_frames": int(yields[0]) if len(yields) else None,
            "answered": bool(words[end + 1: end + 13].any())}


def _median_or_none(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def _pct(flags: list[bool]) -> float | None:
    return round(100 * float(np.mean(flags)), 1) if flags else None


def step_times(model: CompactLM, batches=(1, 8, 32), frames: int = 200) -> dict[str, float]:
    out = {}
    for b in batches:
        st = model.new_state(b)
        z = torch.zeros(b, dtype=torch.long)
        u = torch.zeros(b, 2, dtype=torch.long)
        ts = []
        for i in range(frames):
            t0 = time.perf_counter()
            model.step(st, u, z, z, z)
            ts.append(time.perf_counter() - t0)
        out[f"step_ms_median_b{b}"] = round(1e3 * float(np.median(ts[20:])), 3)
    return out
