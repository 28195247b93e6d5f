"""Talked over: the Voicer's pause, and the rule that tells a backchannel from an interruption."""
import time

import numpy as np
import pytest

from tandem.turn.backchannel import (AWAIT_WORDS_FRAMES, DROP, END_QUIET_FRAMES, FRAME_S, LATE_WORDS_FRAMES,
                                     MAX_BACKCHANNEL_FRAMES, MAX_SILENCE_S, MAX_TALKED_OVER_FRAMES, MODEL_YIELD_FRAMES,
                                     PAUSE, PAUSE_FRAMES, RESUME, WORDS_DECIDE_FRAMES, BargeInJudge, burst_words,
                                     is_backchannel, is_hum, opens_interruption)
from tandem.speak.frontend import BARGE_IN_FRAMES
from tandem.speak.tts import Cut, Voicer


class RampTTS:
    """Every sample different (a ramp over 1 s per word): where playback is shows in the samples."""

    sample_rate = 24000

    def synthesize(self, text: str) -> np.ndarray:
        n = 24000 * len(text.split())
        return (0.01 + 0.5 * np.arange(n) / n).astype(np.float32)


def ready_voicer(text: str) -> Voicer:
    v = Voicer(RampTTS())
    v.say(text)
    deadline = time.time() + 5
    while v.synthesizing and time.time() < deadline:
        time.sleep(0.01)
    return v


def test_pause_keeps_the_place_and_resume_plays_the_very_next_samples():
    v = ready_voicer("one two")
    try:
        whole = RampTTS().synthesize("one two")
        a, started = v.pull(1000)
        assert started == ["one two"] and np.array_equal(a, whole[:1000])
        v.pause()
        assert v.paused and v.busy, "a paused voice still has something to say"
        for _ in range(5):
            z, started = v.pull(1000)
            assert not z.any() and started == []
        assert v.remaining_s() == pytest.approx((len(whole) - 1000) / 24000)
        v.resume()
        b, started = v.pull(1000)
        assert not v.paused and started == [] and np.array_equal(b, whole[1000:2000])
    finally:
        v.close()


def test_clear_after_a_pause_cuts_the_segment_where_it_paused_and_ends_the_pause():
    v = ready_voicer("one two three four")
    try:
        v.pull(24000)  # one word of four heard
        v.pause()
        v.pull(24000)
        v.pull(24000)
        assert v.clear() == Cut("one two three four", pytest.approx(0.25))
        assert not v.paused and not v.busy
        v.say("five")
        deadline = time.time() + 5
        while v.synthesizing and time.time() < deadline:
            time.sleep(0.01)
        out, started = v.pull(1000)
        assert started == ["five"] and out.any(), "what is said after the drop is played"
    finally:
        v.close()


@pytest.mark.parametrize("text", ["Mm-hmm.", "mhm", "Uh-huh.", "Yeah.", "yes", "Okay.", "Right.", "I see.",
                                  "Sure.", "Got it.", "Yeah, yeah, I see.", "M H M M", "Oh, okay.", "Hmm?"])
def test_backchannel_words(text):
    assert is_backchannel(text)


@pytest.mark.parametrize("text", ["", "...", "Wait, what about Spain?", "No.", "Stop.", "Yeah, but why?",
                                  "what", "I see a problem", "Okay, what is the capital of Spain?"])
def test_words_that_take_the_turn(text):
    assert not is_backchannel(text)


def test_the_burst_words_are_what_the_transcript_gained_since_the_burst_began():
    assert burst_words("tell me about France", "tell me about France") == ""
    assert burst_words("tell me about France", "Mm-hmm.") == "Mm-hmm."
    assert burst_words("tell me", "tell me more") == " more"
    assert burst_words("tell me", "") == ""


def test_a_resumed_burst_never_costs_more_than_half_a_second_of_silence():
    assert MAX_SILENCE_S <= 0.5
    assert MAX_BACKCHANNEL_FRAMES >= PAUSE_FRAMES > BARGE_IN_FRAMES


def run(judge: BargeInJudge, frames: list[tuple[bool, str]], talking: bool = True):
    """Decisions per frame as (frame index, action, reason)."""
    out = []
    for i, (speaking, transcript) in enumerate(frames):
        d = judge.step(speaking, transcript, talking)
        if d is not None:
            out.append((i, d.action, d.reason))
    return out


PREV = "tell me about France"  # the last turn's transcript, still there when a burst begins
QUIET = [(False, PREV)] * 4
PAUSED_AT = 4 + PAUSE_FRAMES - 1  # the frame a burst begun after QUIET pauses the voice, when it does


def test_a_short_backchannel_is_talked_through_with_no_pause():
    burst = [(True, PREV)] * 3 + [(True, "Yeah")] * 2
    assert run(BargeInJudge(), QUIET + burst + [(False, "Yeah.")] * 30) == []


def test_a_backchannel_said_at_length_is_talked_through():
    burst = [(True, PREV)] * 3 + [(True, "Yeah, yeah")] * 8
    judge = BargeInJudge()
    assert run(judge, QUIET + burst + [(False, "Yeah, yeah.")] * 4) == []
    assert judge.holding, "its late words are still watched"


@pytest.mark.parametrize("text", ["m", "Mm.", "Hmm", "mhm", "M-H-M-M-", "M H M M", "Mm-hmm.", "Uh-huh.", "uh huh",
                                  "M-N... M-N.", "Mmf"])
def test_hums_that_never_open_a_question(text):
    assert is_hum(text) and is_backchannel(text)


@pytest.mark.parametrize("text", ["", "uh", "Um", "h", "n", "No", "Okay", "Yeah", "Mm, wait", "My", "Uh, what about Spain?"])
def test_what_a_user_may_go_on_from_is_no_hum(text):
    assert not is_hum(text)


@pytest.mark.parametrize("text", ["Wait", "Stop.", "Hold on, what", "Sorry to interrupt", "Okay, but", "No.",
                                  "Actually, how many", "Mm, what about"])
def test_words_that_open_an_interruption(text):
    assert opens_interruption(text)


@pytest.mark.parametrize("text", ["Mm-hmm.", "Yeah, yeah.", "and the making", "Amen? Amen?", "I'm at...",
                                  "And I'm done...", "Holdon"])
def test_what_whisper_writes_for_a_hum_opens_nothing(text):
    """The FDB dev set's "Mm-hmm" and "Uh-huh", as Whisper heard them over 0.3-0.9 s of speech."""
    assert not opens_interruption(text)


def test_a_slow_hum_is_talked_through_once_its_transcript_shows_a_hum():
    """A slow "Mm-hmm" (1.1 s, as Festival says it) outlasts PAUSE_FRAMES: its first partial, "m", is
    enough to talk on through the rest of it (a hum does not open a question)."""
    hum = [(True, PREV)] * 5 + [(True, "m")] * 3 + [(True, "M-H-M-M-")] * 6
    judge = BargeInJudge()
    assert run(judge, QUIET + hum + [(False, "M-H-M-")] * 30) == []
    assert not judge.holding, "the watch ends as for any resumed burst"


def test_a_hum_that_goes_into_a_question_drops_the_reply():
    burst = [(True, PREV)] * 3 + [(True, "Mm")] * 2 + [(True, "Mm, what about")] * 2 + QUIET
    assert run(BargeInJudge(), QUIET + burst) == [(PAUSED_AT, DROP, "words")]


def test_a_hum_that_goes_on_and_on_is_taking_the_turn():
    d = run(BargeInJudge(), QUIET + [(True, PREV)] * 3 + [(True, "Mm-hmm")] * MAX_TALKED_OVER_FRAMES + QUIET)
    assert d == [(4 + MAX_TALKED_OVER_FRAMES, DROP, "long")]


def test_a_backchannel_word_that_opens_a_question_drops_the_reply_as_the_question_shows():
    """"Okay, wait, how many legs..." is heard as "Okay" first: talked on, until "wait" shows."""
    burst = [(True, PREV)] * 3 + [(True, "Okay okay")] * 3 + [(True, "Okay, wait.")] + [(True, "Okay, wait, how")] * 3
    assert run(BargeInJudge(), QUIET + burst + QUIET) == [(10, DROP, "late words")]


def test_speech_again_after_a_talked_through_backchannel_is_a_new_burst():
    burst = [(True, PREV)] * 3 + [(True, "Yeah")] * 2 + [(False, "Yeah")] * 2 + [(True, "Yeah, yeah")] * 3
    assert run(BargeInJudge(), QUIET + burst + QUIET) == []
    burst = [(True, PREV)] * 5 + [(False, PREV)] * 2 + [(True, PREV)] * PAUSE_FRAMES
    assert run(BargeInJudge(), QUIET + burst + QUIET) == [(4 + 7 + PAUSE_FRAMES - 1, PAUSE, "talked over"),
                                                          (4 + 7 + PAUSE_FRAMES + 1, RESUME, "no words")]


def test_the_model_cannot_yield_to_what_the_transcript_shows_is_a_backchannel():
    judge = BargeInJudge()
    run(judge, QUIET + [(True, PREV)] * 3 + [(True, "Mm-hmm")] * MODEL_YIELD_FRAMES)
    assert judge.holding and judge.model_yields() is None
    judge = BargeInJudge()
    run(judge, QUIET + [(True, PREV)] * 3 + [(True, "Wait")])
    assert not judge.holding, "other words drop it by the rule already"
    judge = BargeInJudge()
    run(judge, QUIET + [(True, PREV)] * MODEL_YIELD_FRAMES)
    assert judge.model_yields() is None, "no longer than a backchannel the model misjudges: the rule decides"
    run(judge, [(True, PREV)])
    assert judge.model_yields().reason == "model", "longer, no words heard yet: the model decides"


def test_a_cough_without_a_transcript_is_talked_through():
    assert run(BargeInJudge(), QUIET + [(True, PREV)] * 4 + QUIET * 8) == []


def test_a_burst_as_long_as_a_backchannel_with_no_words_pauses_then_resumes_when_it_ends():
    d = run(BargeInJudge(), QUIET + [(True, PREV)] * MAX_BACKCHANNEL_FRAMES + QUIET * 8)
    assert d == [(PAUSED_AT, PAUSE, "talked over"), (4 + MAX_BACKCHANNEL_FRAMES + END_QUIET_FRAMES - 1, RESUME, "no words")]
    assert (d[1][0] - d[0][0]) * FRAME_S <= MAX_SILENCE_S


def test_a_burst_longer_than_anyone_nods_is_an_interruption():
    d = run(BargeInJudge(), QUIET + [(True, PREV)] * 25 + QUIET)
    assert d == [(PAUSED_AT, PAUSE, "talked over"), (4 + MAX_TALKED_OVER_FRAMES, DROP, "long")]


def test_a_burst_longer_than_a_backchannel_stays_paused_until_its_words_decide():
    long = [(True, PREV)] * (MAX_BACKCHANNEL_FRAMES + 3)
    d = run(BargeInJudge(), QUIET + long + [(False, PREV)] * 4 + [(False, "Stop. What is the time?")] + QUIET)
    assert d == [(PAUSED_AT, PAUSE, "talked over"), (4 + len(long) + 4, DROP, "words")]
    d = run(BargeInJudge(), QUIET + long + [(False, PREV)] * 4 + [(False, "Right.")] + QUIET)
    assert d == [(PAUSED_AT, PAUSE, "talked over"), (4 + len(long) + 4, RESUME, "backchannel")]


def test_a_long_noise_that_never_shows_words_resumes_once_its_final_could_have_come():
    long = [(True, PREV)] * (MAX_BACKCHANNEL_FRAMES + 3)
    d = run(BargeInJudge(), QUIET + long + [(False, PREV)] * 20)
    assert d == [(PAUSED_AT, PAUSE, "talked over"), (4 + len(long) + AWAIT_WORDS_FRAMES - 1, RESUME, "no words")]


def test_a_short_bursts_made_up_words_resume_the_voice_and_its_late_final_keeps_it():
    """FDB dev set, flite-rms's slow "Mm-hmm" (0.9 s): Whisper heard "and the making", then "and then make a
    man", and the reply was dropped on them. A burst this short is not trusted with other words."""
    judge = BargeInJudge()
    burst = [(True, PREV)] * 5 + [(True, "and the making")] * 5
    d = run(judge, QUIET + burst + [(False, "and the making")] * 3 + [(False, "and then make a man")] * 20)
    assert d == [(PAUSED_AT, PAUSE, "talked over"), (4 + len(burst) + END_QUIET_FRAMES - 1, RESUME, "short")]


def test_a_burst_longer_than_a_hum_is_decided_by_its_other_words():
    burst = [(True, PREV)] * 5 + [(True, "I think the answer is")] * 9
    assert run(BargeInJudge(), QUIET + burst + QUIET) == [
        (PAUSED_AT, PAUSE, "talked over"), (4 + WORDS_DECIDE_FRAMES, DROP, "words")]


def test_a_short_burst_whose_words_open_an_interruption_drops_the_reply_at_once():
    d = run(BargeInJudge(), QUIET + [(True, PREV)] * 4 + [(True, "Wait, what")] + QUIET)
    assert d == [(8, DROP, "words")]


def test_words_that_come_after_the_burst_still_drop_the_reply():
    judge = BargeInJudge()
    burst = [(True, PREV)] * 4 + [(False, PREV)] * 5 + [(False, "Stop.")]
    assert run(judge, QUIET + burst) == [(4 + len(burst) - 1, DROP, "late words")]
    assert not judge.holding
    # ...but not once the watch is over: a later transcript is the next turn's business
    judge = BargeInJudge()
    late = [(True, PREV)] * 4 + [(False, PREV)] * (END_QUIET_FRAMES + LATE_WORDS_FRAMES) + [(False, "Stop.")]
    assert run(judge, QUIET + late) == []


def test_speech_again_right_after_a_resume_pauses_at_once():
    burst = [(True, PREV)] * MAX_BACKCHANNEL_FRAMES + [(False, PREV)] * 3 + [(True, PREV)] * (MAX_TALKED_OVER_FRAMES + 1)
    d = run(BargeInJudge(), burst)
    assert d == [(PAUSE_FRAMES - 1, PAUSE, "talked over"), (8, RESUME, "no words"), (10, PAUSE, "continued"),
                 (10 + MAX_TALKED_OVER_FRAMES, DROP, "long")]


def test_the_back_end_starts_nothing_on_words_a_burst_does_not_take_the_turn_with():
    judge = BargeInJudge()
    assert not judge.keeps_reply("and the making"), "no burst: nothing to keep"
    run(judge, QUIET + [(True, PREV)] * 5 + [(True, "and the making")] * 3)
    assert judge.keeps_reply("and the making") and judge.keeps_reply("Mm-hmm.")
    assert not judge.keeps_reply("Wait, what is"), "words that open an interruption take the turn"
    run(judge, [(True, "and the making of it all")] * 5)
    assert not judge.keeps_reply("and the making of it all"), "a burst this long is trusted with its words"


def test_nothing_to_judge_when_the_assistant_is_silent():
    judge = BargeInJudge()
    assert run(judge, [(True, "hello")] * 10, talking=False) == []
    assert judge.step(True, "hello", True).action == PAUSE, "the assistant starts over a user still talking"


def test_a_new_reply_restarts_the_count():
    judge = BargeInJudge()
    run(judge, [(True, PREV)] * 2)
    judge.new_reply()  # the voice activity of the turn being answered lags into the reply
    assert run(judge, [(True, PREV)] * (PAUSE_FRAMES - 1)) == []


def test_the_pause_is_within_half_a_second_of_the_onset():
    assert PAUSE_FRAMES * FRAME_S < 0.5


def test_a_dip_in_the_voice_activity_does_not_end_a_burst_nor_hide_its_length():
    """One quiet frame inside speech (a closure between words) neither ends a burst nor is left out of its
    length: the silence a resumed burst costs stays within MAX_SILENCE_S."""
    speech = [(True, PREV)] * 4 + [(False, PREV)] + [(True, PREV)] * (MAX_BACKCHANNEL_FRAMES - 5)
    d = run(BargeInJudge(), speech + QUIET)
    assert [a for _, a, _ in d] == [PAUSE, RESUME]
    assert (d[1][0] - d[0][0]) * FRAME_S <= MAX_SILENCE_S
    d = run(BargeInJudge(), speech + [(True, PREV)] + QUIET * 3)  # one frame more: it waits for words
    assert [(a, r) for _, a, r in d] == [(PAUSE, "talked over"), (RESUME, "no words")]
    assert (d[1][0] - d[0][0]) * FRAME_S > MAX_SILENCE_S
