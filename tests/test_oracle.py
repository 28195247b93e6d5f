from tandem.think.oracle import KamePolicy, LatePlaybackPolicy, OracleStream, make_policy

PAD, START = 0, 99


def feed(stream: OracleStream, frames: range) -> list[int]:
    return [stream.token(f) for f in frames]


def test_pad_before_any_reset():
    s = OracleStream(START, PAD)
    assert feed(s, range(5)) == [PAD] * 5


def test_reset_pins_start_token_to_current_frame_then_one_token_per_frame_then_pad():
    s = OracleStream(START, PAD)
    assert feed(s, range(0, 3)) == [PAD] * 3
    s.reset(3)
    s.append([10, 11, 12], 3)
    assert feed(s, range(3, 9)) == [START, 10, 11, 12, PAD, PAD]


def test_tokens_arriving_in_time_are_played_in_their_slots():
    s = OracleStream(START, PAD)
    s.reset(0)
    out = [s.token(0)]
    s.append([10], 1)  # slot 1 not yet fed
    out.append(s.token(1))
    out.append(s.token(2))  # nothing for slot 2 yet
    s.append([11, 12], 3)  # slot 2 passed: 11 is late, 12 lands on frame 3
    out += feed(s, range(3, 5))
    assert out == [START, 10, PAD, 12, PAD]
    assert s.buf.dropped == 1


def test_late_tokens_are_never_fed():
    s = OracleStream(START, PAD)
    s.reset(0)
    assert feed(s, range(0, 5)) == [START, PAD, PAD, PAD, PAD]
    s.append([10, 11, 12, 13, 14, 15], 5)  # indices 1..4 passed, 5 and 6 still ahead
    assert feed(s, range(5, 9)) == [14, 15, PAD, PAD]
    assert s.buf.dropped == 4


def test_replacement_midway_restarts_from_the_new_start_token():
    s = OracleStream(START, PAD)
    s.reset(0)
    s.append([10, 11, 12, 13], 0)
    assert feed(s, range(0, 3)) == [START, 10, 11]
    s.reset(3)
    s.append([20, 21], 3)
    assert feed(s, range(3, 7)) == [START, 20, 21, PAD]


def test_append_without_reset_is_ignored():
    s = OracleStream(START, PAD)
    s.append([10, 11], 0)
    assert feed(s, range(3)) == [PAD] * 3


def test_late_playback_policy_plays_late_tokens_in_order():
    s = OracleStream(START, PAD, LatePlaybackPolicy())
    s.reset(0)
    assert feed(s, range(0, 3)) == [START, PAD, PAD]
    s.append([10, 11, 12], 3)
    assert feed(s, range(3, 7)) == [10, 11, 12, PAD]


def test_make_policy_names():
    assert isinstance(make_policy("kame"), KamePolicy)
    assert make_policy("late-playback").name == "late-playback"
    import pytest

    with pytest.raises(ValueError, match="unknown oracle policy"):
        make_policy("nope")


def _prefix_stream() -> OracleStream:
    return OracleStream(START, PAD, make_policy("prefix"))


def test_prefix_policy_same_answer_again_does_not_restart_the_stream():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11, 12, 13], 0)
    assert feed(s, range(0, 3)) == [START, 10, 11]
    s.reset(3)  # the final transcript's oracle: the same answer, streamed again
    s.append([10, 11], 3)
    assert feed(s, range(3, 4)) == [12]
    s.append([12, 13], 4)
    assert feed(s, range(4, 6)) == [13, PAD]
    assert s.buf.restarts == 0


def test_prefix_policy_splices_a_difference_that_was_not_fed_yet():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11, 12, 13], 0)
    assert feed(s, range(0, 2)) == [START, 10]
    s.reset(2)
    s.append([10, 11, 20, 21], 2)  # differs at index 3, and index 2 is next: seamless
    assert feed(s, range(2, 7)) == [11, 20, 21, PAD, PAD]
    assert (s.buf.kept, s.buf.restarts) == (1, 0)


def test_prefix_policy_restarts_when_the_fed_content_is_contradicted():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11, 12], 0)
    assert feed(s, range(0, 3)) == [START, 10, 11]
    s.reset(3)
    s.append([10], 3)  # agrees so far: the current oracle goes on meanwhile
    assert feed(s, range(3, 4)) == [12]
    s.append([30, 31], 4)  # index 2 (11) was fed already: restart from the start token now
    assert feed(s, range(4, 9)) == [START, 10, 30, 31, PAD]
    assert s.buf.restarts == 1


def test_prefix_policy_longer_answer_extends_the_stream():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11], 0)
    assert feed(s, range(0, 4)) == [START, 10, 11, PAD]
    s.reset(4)
    s.append([10, 11, 12], 4)
    s.append([13], 4)
    assert feed(s, range(4, 7)) == [12, 13, PAD]


def test_prefix_policy_a_shorter_answer_stops_the_old_tail_when_its_stream_ends():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11, 12, 13, 14], 0)  # "Paris, a city of light."
    assert feed(s, range(0, 3)) == [START, 10, 11]
    s.reset(3)
    s.append([10, 11], 3)  # "Paris." from the final transcript: a strict prefix so far
    assert feed(s, range(3, 4)) == [12], "while it streams it may still go on as the old one did"
    s.end(4)
    assert feed(s, range(4, 7)) == [PAD] * 3, "once it is complete, the old tail beyond it is not fed"
    assert (s.buf.kept, s.buf.restarts) == (1, 0)


def test_prefix_policy_a_complete_shorter_answer_cuts_the_tail_before_it_is_fed():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11, 12, 13], 0)
    assert feed(s, range(0, 2)) == [START, 10]
    s.reset(2)
    s.append([10, 11, 12], 2)
    s.end(2)
    assert feed(s, range(2, 6)) == [11, 12, PAD, PAD]
    assert s.buf.restarts == 0


def test_prefix_policy_the_same_answer_ending_changes_nothing():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11, 12], 0)
    assert feed(s, range(0, 2)) == [START, 10]
    s.reset(2)
    s.append([10, 11, 12], 2)
    s.end(2)
    assert feed(s, range(2, 5)) == [11, 12, PAD]
    s.reset(5)  # the candidate was closed: a later oracle is compared afresh
    s.append([10, 11, 12, 40], 5)
    assert feed(s, range(5, 7)) == [40, PAD]


def test_prefix_policy_an_oracle_that_ends_with_no_words_does_not_silence_the_current_one():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11, 12], 0)
    assert feed(s, range(0, 2)) == [START, 10]
    s.reset(2)
    s.end(2)
    assert feed(s, range(2, 5)) == [11, 12, PAD]


def test_end_changes_nothing_for_kame_and_late_playback():
    for policy in ("kame", "late-playback"):
        s = OracleStream(START, PAD, make_policy(policy))
        s.reset(0)
        s.append([10, 11], 0)
        s.end(0)
        assert feed(s, range(0, 4)) == [START, 10, 11, PAD]


def test_upcoming_is_what_each_policy_will_feed_next():
    """OracleStream.upcoming: the tokens the buffer holds for the frames after this one, as each policy
    will feed them (the compact front-end's voice reads a settled oracle ahead of its feed)."""
    for name in ("kame", "late-playback", "prefix"):
        s = OracleStream(START, PAD, make_policy(name))
        assert s.upcoming(0) == ()
        s.reset(1)
        s.append([10, 11, 12], 1)
        fed = [s.token(1)]
        assert s.upcoming(1) == (10, 11, 12), name
        fed += feed(s, range(2, 4))
        assert s.upcoming(3) == (12,), name
        ahead = s.upcoming(3)
        assert feed(s, range(4, 6)) == [*ahead, PAD], f"{name}: upcoming is what is fed next"


def test_upcoming_with_a_newer_oracle_being_collected_holds_only_what_it_repeated():
    s = _prefix_stream()
    s.reset(0)
    s.append([10, 11, 12, 13], 0)
    assert feed(s, range(0, 2)) == [START, 10]
    s.reset(2)  # a newer oracle: so far the same as the current one
    s.append([10, 11], 2)
    assert s.upcoming(1) == (11,), "12 and 13 may be replaced by the newer oracle before they are fed"
    s.append([12], 2)
    assert s.upcoming(1) == (11, 12)
