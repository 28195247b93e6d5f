"""The compact front-end's data pipeline: streams, simulated oracles and the teacher's targets."""
import random

import numpy as np
import pytest

from tandem.train.compact.data import DECISION_DELAY, _Teacher, build_compact_example
from tandem.frontends.compact.streams import UserTokenQueue, transcript_delta, vad_bucket
from tandem.frontends.compact.tokenizer import END, PAD, START
from tandem.train.compact.train import train_tokenizer
from tandem.train.synth import entity, is_heldout, make_dialogue


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(random.Random(0), 512)


def test_transcript_delta_sends_new_words_and_revised_tails():
    assert transcript_delta("", "What is") == "What is"
    assert transcript_delta("What is", "What is the capital") == "the capital"
    assert transcript_delta("What is the capital of us", "What is the capital of Australia?") == "Australia?"
    assert transcript_delta("What is the capital?", "What is the capital?") == ""


def test_user_queue_feeds_two_tokens_per_frame_then_pad(tok):
    q = UserTokenQueue(tok.encode, PAD)
    q.update("What is")
    ids = tok.encode(" What is")
    got = [t for _ in range(5) for t in q.next(2)]
    assert got[: len(ids)] == ids and all(t == PAD for t in got[len(ids):])
    assert vad_bucket(0.0) == 0 and vad_bucket(1.0) == 7


def test_heldout_entities_are_disjoint_from_training_ones():
    rng = random.Random(0)
    train = {entity(rng, False) for _ in range(300)}
    held = {entity(rng, True) for _ in range(300)}
    assert not train & held
    assert all(is_heldout(e) for e in held) and not any(is_heldout(e) for e in train)


def test_teacher_is_silent_while_the_user_speaks_and_starts_after_the_turn(tok):
    rng = random.Random(1)
    for _ in range(30):
        ex = build_compact_example(rng, tok)
        assert not np.any((ex.target > END) & ex.speech), "the teacher never talks over the user"
        for info in ex.turns:
            if info.reply_start is not None:
                # a frame later when the stream restarts at that very frame: the newer oracle is not fed yet
                assert info.reply_start - (info.end_frame + DECISION_DELAY) in (0, 1)


def test_oracle_stream_follows_kame_semantics(tok):
    ex = build_compact_example(random.Random(2), tok, scenario="normal", policy="kame")
    starts = np.flatnonzero(ex.oracle == START)
    assert len(starts) >= 1
    for info in ex.turns:
        for frame, text in info.oracle_texts:
            assert ex.oracle[frame] == START or frame >= len(ex.oracle) or frame in starts


def test_replaced_oracle_leads_to_a_repair_and_the_newer_answer(tok):
    rng = random.Random(3)
    repaired = right = 0
    for _ in range(30):
        d = make_dialogue(rng, n_turns=1)
        ex = build_compact_example(rng, tok, dialogue=d, scenario="replaced")
        said = tok.decode([int(t) for t in ex.target if t > END])
        if d.turns[0].answer and "sorry," in said:
            repaired += 1
            right += d.turns[0].answer in said.split("sorry,")[-1]
    # a slow stream (10%) can lose the newer oracle's tail: KAME drops late tokens
    assert repaired >= 8 and right >= 0.7 * repaired


def test_no_oracle_means_opener_then_fallback_then_silence(tok):
    rng = random.Random(4)
    d = make_dialogue(rng, n_turns=1)
    ex = build_compact_example(rng, tok, dialogue=d, scenario="never")
    said = tok.decode([int(t) for t in ex.target if t > END])
    assert said and len(said.split()) <= 12
    last = np.flatnonzero(ex.target > END)[-1]
    assert last < len(ex.target) - 5


def test_user_queue_backlog_keeps_only_the_newest_tokens(tok):
    q = UserTokenQueue(tok.encode, PAD, max_backlog=4)
    q.update("what is " + "wh " * 40 + "the capital")
    assert len(q.queue) == 4
    assert tok.decode(list(q.queue)).endswith("capital")


@pytest.mark.parametrize("policy", ["kame", "prefix"])
def test_copied_targets_point_at_the_frame_that_fed_them(tok, policy):
    rng = random.Random(5)
    copies = 0
    for _ in range(40):
        ex = build_compact_example(rng, tok, policy=policy)
        assert ex.policy == policy
        m = ex.src >= 0
        assert np.all(ex.src[m] <= np.flatnonzero(m)), "a copy never comes from the future"
        assert np.array_equal(ex.oracle[ex.src[m]], ex.target[m]), "the source frame fed that very token"
        copies += int(m.sum())
        spoken = ex.target > END
        assert not np.any(m & ~spoken)
    assert copies > 500


def _teach(tok, old: str, new: str, new_at: int, start: int = 10, frames: int = 90):
    """The teacher over a hand-made KAME feed: `old` restarts the stream at frame 0 and `new` at
    `new_at`, one token per frame after each start token. Returns the target per frame."""
    old_ids, new_ids = tok.encode(old), tok.encode(new)

    def fed(ids, r):
        return lambda j, f: r + 1 + j if r + 1 + j <= f else None

    def visible_before(ids, j, f):
        if ids == new_ids and (g := fed(ids, new_at)(j, f)) is not None:
            return g
        return fed(ids, 0)(j, f) if ids[: j + 1] == old_ids[: j + 1] and 1 + j < new_at else None

    def visible(ids, j, f):  # fed since the latest restart
        g = visible_before(ids, j, f)
        return g if g is not None and (f < new_at or g >= new_at) else None

    target = np.full(frames, PAD, np.int64)
    src = np.full(frames, -1, np.int64)
    _Teacher(tok, random.Random(0)).run(target, src, start, frames, [(0, old_ids), (new_at, new_ids)],
                                        visible, visible_before)
    return target


def _first_frame_of(tok, target, text: str) -> int:
    for f in range(len(target)):
        if tok.decode([int(t) for t in target[: f + 1] if t > END]).count(text):
            return f
    raise AssertionError(f"{text!r} never said in {tok.decode([int(t) for t in target if t > END])!r}")


def test_teacher_repairs_only_once_the_newer_oracle_shows_the_contradiction(tok):
    old, new = "It is Eackgrom Carbleash.", "It is Port Carbleash."
    target = _teach(tok, old, new, new_at=16)
    said = tok.decode([int(t) for t in target if t > END])
    assert said.startswith("It is Eackgrom") and said.endswith("sorry, It is Port Carbleash."), said
    old_ids, new_ids = tok.encode(old), tok.encode(new)
    clash = next(k for k, (a, b) in enumerate(zip(old_ids, new_ids)) if a != b)
    assert _first_frame_of(tok, target, "sorry") >= 16 + 1 + clash  # the frame that feeds the first difference
    # while the newer oracle catches up nothing past the word under way is said
    assert "Carbleash. sorry" not in said


def test_teacher_carries_on_when_the_newer_oracle_agrees_with_what_was_said(tok):
    old, new = "It is Eackgrom Carbleash.", "It is Eackgrom Fliarsh."
    target = _teach(tok, old, new, new_at=18)
    said = tok.decode([int(t) for t in target if t > END])
    assert "sorry" not in said and said.startswith("It is Eackgrom") and said.endswith("Fliarsh."), said
    # the newer oracle's own word is said only once the stream has fed it
    old_ids, new_ids = tok.encode(old), tok.encode(new)
    clash = next(k for k, (a, b) in enumerate(zip(old_ids, new_ids)) if a != b)
    assert _first_frame_of(tok, target, "Fl") >= 18 + 1 + clash


def test_the_teacher_talks_through_a_backchannel_and_stops_for_an_interruption(tok):
    from tandem.train.compact.data import INTERRUPT_YIELD_FRAMES

    for kind in ("backchannel", "interruption"):
        checked = 0
        rng = random.Random(11)
        for _ in range(40):
            d = make_dialogue(rng, n_turns=2, talk_over_p=1.0, talk_over_kind=kind)
            assert d.turns[1].over and (d.turns[1].kind == "backchannel") == (kind == "backchannel")
            ex = build_compact_example(rng, tok, dialogue=d, scenario="normal", policy="prefix")
            on, end = ex.turns[1].start_frame, ex.turns[1].end_frame
            spoke = ex.target > END
            checked += 1
            if kind == "backchannel":
                assert ex.turns[1].reply_start is None, "a backchannel gets no reply of its own"
                assert not (ex.target[on: end + 12] == END).any(), "the reply goes on through it"
            else:
                assert (ex.target[on + INTERRUPT_YIELD_FRAMES: end + 1] == END).all(), "the model's yield"
                assert not (ex.target[on: on + INTERRUPT_YIELD_FRAMES] == END).any()
                assert not spoke[on + INTERRUPT_YIELD_FRAMES: end + 1].any(), "silent while the user goes on"
                assert ex.turns[1].reply_start is not None and ex.turns[1].reply_start > end, "then answers"
        assert checked >= 10, kind


def test_a_backchannel_turn_gets_no_oracle():
    from tandem.train.oracles import COMPACT, dialogue_events

    d = make_dialogue(random.Random(3), n_turns=2, talk_over_p=1.0, talk_over_kind="backchannel")
    events = dialogue_events(random.Random(0), d.turns, COMPACT)
    assert events[1].scenario == "backchannel" and events[1].events == []
    assert events[0].events, "the question before it still has its oracles"


def test_the_opening_scenario_sends_the_restated_opening_then_the_reply(tok):
    from tandem.train.oracles import COMPACT, turn_events
    from tandem.train.synth import opening_of

    rng = random.Random(5)
    for _ in range(50):
        d = make_dialogue(rng, n_turns=1)
        opening = opening_of(d.turns[0])
        if opening is None:
            continue
        ev = turn_events(rng, d.turns[0], COMPACT, scenario="opening")
        texts = [e.text for e in ev]
        assert opening in texts and texts[-1] == d.turns[0].reply
        assert texts.index(opening) < len(texts) - 1
        assert d.turns[0].reply.startswith(opening)
        return
    raise AssertionError("no dialogue with an opening")


def test_copy_exactness_judges_only_the_words_a_cut_stream_held_whole(tok):
    from tandem.train.compact.data import whole_words

    text = "About 521 years ago."
    full = tok.encode(text)
    for cut in range(1, len(full)):
        kept = tok.decode(whole_words(tok, full[:cut], full)).split()
        assert kept == text.split()[: len(kept)], "only whole words of the sentence are kept"
        if cut == len(full) or tok.starts_word(full[cut]):  # the cut fell between words: nothing dropped
            assert kept == tok.decode(full[:cut]).split()
        else:  # the broken-off word (a fragment, or nothing but the space before it) is dropped
            rest = tok.decode(full[:cut]).split()[len(kept):]
            assert len(rest) <= 1 and rest != text.split()[len(kept): len(kept) + 1]
    assert whole_words(tok, full, None) == full, "a stream that was not cut is judged whole"
