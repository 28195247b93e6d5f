"""The one oracle simulator both training recipes use (tandem.train.oracles): KAME's recipe for the
moshi front-end, the same pipeline with the compact recipe's delays, scenarios and slow streams."""
import random
from dataclasses import replace

import numpy as np
import pytest

from tandem.train import oracles as ko
from tandem.train.synth import Turn, Word

VOCAB = 120
PLAIN = replace(ko.KAME, augment=False)  # no skips, no shifts


def _turn(n_words: int = 8, start: float = 1.0, word_s: float = 0.3) -> Turn:
    words = [Word(f"w{i}", start + i * word_s, start + (i + 1) * word_s - 0.02) for i in range(n_words)]
    return Turn(words, " ".join(w.text for w in words), "The capital of Blorp is Zantor.", "question", "Zantor")


def test_hint_tiers_follow_kame_thresholds():
    assert [ko.hint_tier(f) for f in (0.1, 0.5, 0.6, 0.65, 0.7, 0.9, 0.96, 0.995)] == [0, 0, 1, 1, 2, 3, 4, 5]


def test_events_every_half_second_from_the_second_word_then_the_true_reply():
    turn = _turn()
    evs = ko.turn_events(random.Random(0), turn, PLAIN)
    times = [e.t for e in evs]
    assert times[0] == pytest.approx(turn.words[1].end)
    assert np.allclose(np.diff(times[:-1]), 0.5)
    assert evs[-1].t == turn.end and evs[-1].text == turn.reply and evs[-1].tier == ko.FINAL_TIER == 6
    frac = [(e.t - turn.start) / (turn.end - turn.start) for e in evs[:-1]]
    assert [e.tier for e in evs[:-1]] == [ko.hint_tier(f) for f in frac]
    # no hint: never the true reply; the random-oracle variant: other replies, then the true one
    many = [e for s in range(30) for e in ko.turn_events(random.Random(s), turn, PLAIN)[:-1] if e.tier == 0]
    assert many and all(e.text != turn.reply for e in many)
    rv = ko.turn_events(random.Random(1), turn, PLAIN, random_variant=True)
    assert all(e.tier == ko.OTHER_TIER and e.text != turn.reply for e in rv[:-1]) and rv[-1].text == turn.reply


def test_events_land_on_kame_frames():
    turn = _turn()
    delayed = replace(PLAIN, text_delay=2)
    evs = ko.turn_events(random.Random(0), turn, delayed)
    plan = ko.schedule([ko.TurnOracles("normal", evs)], delayed.text_delay)
    assert [f for f, _, _ in plan] == [int(e.t * 12.5) + 1 + 2 for e in evs]
    assert [text for _, text, _ in plan] == [e.text for e in evs]


def test_kame_shifts_each_event_right_1_to_10_or_left_1_to_15_frames():
    turn = _turn()
    evs = [ko.OracleEvent(turn.words[1].end + 0.5 * i, f"event {i}", 1) for i in range(5)]
    base = {e.text: ko.event_frame(e.t) for e in evs}
    moves = set()
    for seed in range(60):
        shifted = ko.shift_events(random.Random(seed), evs, turn, ko.KAME)
        assert [e.t for e in shifted] == sorted(e.t for e in shifted)
        for e in shifted:
            d = ko.event_frame(e.t) - base[e.text]
            assert -15 <= d <= 10 and d != 0, "each event is shifted right 1-10 or left 1-15 frames"
            moves.add(d)
    assert moves == set(range(-15, 0)) | set(range(1, 11))


def test_intermediate_events_are_skipped_at_random_never_the_last():
    turn = _turn()
    full = len(ko.turn_events(random.Random(0), turn, PLAIN)) - 1
    kept = []
    for seed in range(60):
        evs = ko.turn_events(random.Random(seed), turn, ko.KAME)
        assert [e.text for e in evs if e.tier == ko.FINAL_TIER] == [turn.reply], "the last event always comes"
        kept.append(len(evs) - 1)
    assert min(kept) < full and max(kept) > 0, "intermediate events are skipped at random"


def test_compact_recipe_delays_and_scenarios():
    turn = _turn()
    recipe = replace(ko.COMPACT, augment=False)
    normal = ko.turn_events(random.Random(0), turn, recipe, scenario="normal")
    final = normal[-1]
    assert final.text == turn.reply and turn.end + 0.47 + 0.08 <= final.t <= turn.end + 0.6 + 0.35
    assert ko.turn_events(random.Random(0), turn, recipe, scenario="never") == []
    replaced = ko.turn_events(random.Random(0), turn, recipe, scenario="replaced")
    assert replaced[-1].text == turn.reply and replaced[-2].text != turn.reply
    late = ko.turn_events(random.Random(0), turn, recipe, scenario="late")
    assert [e.text for e in late].count(turn.reply) == 1 and late[-1].t > turn.end + 0.47 + 0.08 + 0.8
    with pytest.raises(ValueError, match="unknown oracle scenario"):
        ko.turn_events(random.Random(0), turn, recipe, scenario="sometimes")
    # shifted events never come before the turn is 0.2 s old
    for seed in range(30):
        assert all(e.t >= turn.start + 0.2 for e in ko.turn_events(random.Random(seed), turn, ko.COMPACT))


def test_the_feed_plays_start_then_one_token_per_frame_and_replaces():
    enc = {"a b c": [10, 11, 12], "d": [20]}.__getitem__
    fed = ko.feed(random.Random(0), [(2, "a b c", 0), (4, "d", 1)], 9, enc, start_id=VOCAB, pad_id=3)
    assert fed.tokens.tolist() == [3, 3, VOCAB, 10, VOCAB, 20, 3, 3, 3]
    assert [(e.frame, e.turn, e.ids) for e in fed.events] == [(2, 0, [10, 11, 12]), (4, 1, [20])]
    # the teacher's causal view: what was fed by a frame, and whether since the last restart
    assert fed.visible([10, 11, 12], 0, 3) == 3 and fed.visible([10, 11, 12], 1, 8) is None
    assert fed.visible([10, 11, 12], 0, 5) is None and fed.visible_before([10, 11, 12], 0, 5) == 3
    assert fed.visible([20], 0, 4) is None and fed.visible([20], 0, 5) == 5


def test_a_cut_off_stream_delivers_only_its_first_half():
    enc = {"a b c d": [10, 11, 12, 13]}.__getitem__
    fed = ko.feed(random.Random(0), [(1, "a b c d", 0)], 9, enc, start_id=VOCAB, pad_id=3, cut_p=1.0)
    assert fed.events[0].ids == [10, 11] and fed.tokens.tolist() == [3, VOCAB, 10, 11, 3, 3, 3, 3, 3]


def test_prefix_keep_policy_feeds_an_agreeing_newer_oracle_without_a_restart():
    enc = {"a b c": [10, 11, 12], "a b d": [10, 11, 14]}.__getitem__
    fed = ko.feed(random.Random(0), [(1, "a b c", 0), (3, "a b d", 0)], 8, enc, VOCAB, 3, policy="prefix")
    assert fed.tokens.tolist() == [3, VOCAB, 10, 11, 14, 3, 3, 3]
    assert fed.restarts == [1] and fed.visible([10, 11, 14], 2, 4) == 4


def test_dialogue_oracles_for_the_moshi_recipe():
    from tandem.train.synth import make_dialogue

    rng = random.Random(0)
    d = make_dialogue(rng, n_turns=2)
    enc = lambda text: [5 + len(w) for w in text.split()]  # noqa: E731
    n = int(d.duration * 12.5) + 2
    cols, plan = ko.dialogue_oracles(rng, d.turns, n, enc, VOCAB, 3)
    assert cols.shape == (n,) and (cols == VOCAB).sum() == len({f for f, _, _ in plan if f < n}) > 0
    assert [ti for _, _, ti in plan].count(1) >= 1 and all(t.reply in [x for _, x, _ in plan] for t in d.turns)
