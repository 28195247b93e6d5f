"""The run-time repair: a newer oracle that contradicts what the reply said gets "sorry," and the newer one."""
from __future__ import annotations

from tandem.frontends.compact.repair import RepairWatch
from tandem.frontends.compact.tokenizer import END, PAD, START

SORRY = [90, 91]  # "sorry" ","


def feed(w: RepairWatch, tokens: list[int]) -> None:
    for t in tokens:
        w.fed(t)


def say(w: RepairWatch, tokens: list[int], began: bool = False) -> None:
    for i, t in enumerate(tokens):
        w.said(t, began and i == 0)


def test_a_newer_oracle_that_contradicts_the_reply_is_repaired_once_it_shows_the_difference():
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11, 12, 13])  # "It is Ixdraithnior Quousglenshean."
    say(w, [10, 11, 12], began=True)
    feed(w, [START, 10, 11])  # the newer oracle agrees so far: undecided
    assert w.next_token() is None
    w.said(PAD, False)
    feed(w, [20])  # "North": differs from what was said at the same place
    assert w.next_token() == SORRY[0]
    assert not w.under_way
    w.said(SORRY[0], False)
    assert w.under_way, "begun: said whole, before the word cursor's next piece"
    assert w.next_token() == SORRY[1]
    w.said(SORRY[1], False)
    assert w.next_token() is None and w.repairs == 1 and not w.under_way, "the rest is the model's: it reads the newer oracle"


def test_a_newer_oracle_that_agrees_with_all_that_was_said_is_carried_on_without_a_repair():
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11, 12])
    say(w, [50, 10, 11], began=True)  # an opener ("Well,") before the oracle's words
    feed(w, [START, 10, 11, 12, 13])  # restated with the same words and more
    assert w.next_token() is None and w.repairs == 0


def test_a_reply_that_said_none_of_the_older_oracle_needs_no_repair():
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11])
    say(w, [50, 51], began=True)  # an opener only
    feed(w, [START, 20, 21])
    assert w.next_token() is None


def test_the_users_speech_ends_the_watch_and_a_refused_repair_is_given_up():
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11])
    say(w, [10], began=True)
    w.hears(True)  # the voice-activity tail of the turn: not yet the floor
    w.hears(False)
    say(w, [11])
    feed(w, [START, 20])
    assert w.next_token() == SORRY[0]

    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11])
    say(w, [10, 11], began=True)
    for _ in range(3):
        w.hears(True)
    feed(w, [START, 20, 21])
    assert w.next_token() is None, "an answer to the user's new words repairs nothing"

    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11])
    say(w, [10, 11], began=True)
    feed(w, [START, 20])
    assert w.next_token() == SORRY[0]
    w.said(PAD, False)  # the loop guard or the repeat rule put silence in its place
    assert w.next_token() is None


def test_a_repair_after_the_reply_ended_may_begin_a_new_stretch_of_speech():
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11])
    say(w, [10, 11], began=True)
    for _ in range(10):
        w.said(PAD, False)
    feed(w, [START, 20])
    assert w.next_token() == SORRY[0]
    w.said(SORRY[0], True)  # the front-end counts it as a reply's first word: the repair goes on
    assert w.next_token() == SORRY[1]
    assert END < SORRY[0]


def test_a_repair_the_model_began_itself_is_finished_not_said_twice():
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11])
    say(w, [10, 11], began=True)
    feed(w, [START])
    w.said(SORRY[0], False)  # the model saw the restart and began "sorry" before the stream showed the difference
    feed(w, [20])
    assert w.next_token() == SORRY[1] and w.under_way


def test_the_model_cannot_say_a_second_sorry_right_after_the_repair():
    import torch

    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11])
    say(w, [10, 11], began=True)
    feed(w, [START, 20])
    for t in SORRY:
        assert w.next_token() == t
        w.said(t, False)
    logp = torch.log_softmax(torch.zeros(100), dim=-1)
    assert w.no_second_repair(logp)[SORRY[0]] == float("-inf")
    w.said(20, False)  # the newer oracle's first word: the reply goes on
    assert w.no_second_repair(logp)[SORRY[0]] > float("-inf")


def test_a_reply_the_model_repaired_by_itself_is_not_repaired_again():
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11])
    say(w, [10, 11], began=True)
    feed(w, [START])
    say(w, SORRY)  # its own "sorry," as soon as the stream restarted
    feed(w, [20, 21])
    assert w.next_token() is None and w.repairs == 0


def test_a_long_reply_keeps_only_its_tail_and_still_repairs_the_oracle_it_reads():
    from tandem.frontends.compact.repair import MAX_REPLY_TOKENS

    w = RepairWatch(SORRY)
    say(w, [50 + i % 30 for i in range(MAX_REPLY_TOKENS + 40)], began=True)  # a long reply before the oracle
    feed(w, [START, 10, 11, 12])
    say(w, [10, 11, 12])
    assert len(w.reply) == MAX_REPLY_TOKENS
    feed(w, [START, 10, 20])
    assert w.next_token() == SORRY[0]


def test_a_settled_newer_oracle_is_judged_on_what_it_holds_before_the_feed_reaches_it():
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11, 12, 13])  # "It is Vienna."
    say(w, [10, 11, 12], began=True)
    w.fed(START, (10, 11, 20, 21))  # "It is Canberra." settled: all of it known, none fed yet
    assert w.pending and w.next_token() == SORRY[0], "the clash is known at once, not when Canberra is fed"
    w = RepairWatch(SORRY)
    feed(w, [START, 10, 11, 12])
    say(w, [10, 11], began=True)
    w.fed(START, (10, 11, 12, 13, PAD, END))  # agrees with all that was said and goes on
    w.fed(10)
    assert not w.pending and w.repairs == 0
    w.fed(11)
    w.fed(12)
    assert not w.pending, "judged once, on what it held: the watch is over"
