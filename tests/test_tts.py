"""The Voicer trims the silence a TTS puts around each segment: lead-in and tail are latency and gaps."""
import time

import numpy as np

from tandem.speak.tts import PHRASE_TAIL_S, SENTENCE_TAIL_S, Voicer

SR = 24000


class PaddedFakeTTS:
    """0.3 s lead-in, 0.5 s of tone, 0.4 s tail: like hibari's segments."""

    sample_rate = SR

    def synthesize(self, text: str) -> np.ndarray:
        tone = 0.3 * np.sin(2 * np.pi * 300 * np.arange(SR // 2) / SR)
        return np.concatenate([np.zeros(int(0.3 * SR)), tone, np.zeros(int(0.4 * SR))]).astype(np.float32)


def voiced_length(text: str) -> float:
    v = Voicer(PaddedFakeTTS())
    try:
        v.say(text)
        deadline = time.time() + 5
        while v.synthesizing and time.time() < deadline:
            time.sleep(0.01)
        return v.remaining_s()
    finally:
        v.close()


def test_phrase_keeps_a_short_tail_and_a_sentence_a_longer_one():
    assert abs(voiced_length("the capital of") - (0.02 + 0.5 + PHRASE_TAIL_S)) < 0.01
    assert abs(voiced_length("It is Paris.") - (0.02 + 0.5 + SENTENCE_TAIL_S)) < 0.01


def test_text_queued_before_a_clear_or_close_is_never_synthesized():
    import threading
    import time

    from tandem.speak.tts import Voicer

    class SlowTTS:
        sample_rate = 24000

        def __init__(self):
            self.said, self.gate = [], threading.Event()

        def synthesize(self, text):
            self.gate.wait(2)
            self.said.append(text)
            return np.full(2400, 0.1, np.float32)

    tts = SlowTTS()
    v = Voicer(tts)
    for w in ["one", "two", "three"]:
        v.say(w)
    time.sleep(0.05)  # "one" is being synthesized, "two" and "three" wait
    v.clear()
    tts.gate.set()
    v.close()
    assert tts.said == ["one"], "what waited when the voice was cleared is skipped, not synthesized"
    assert not v._thread.is_alive()


def test_segments_of_up_to_three_words_are_said_faster_and_longer_ones_at_the_voices_pace():
    from tandem.speak.tts import segment_speed

    assert segment_speed("capital") > segment_speed("of the") > segment_speed("is the largest") > 1.0
    assert segment_speed("The capital of Australia is Canberra.") == 1.0
    assert segment_speed("Oslo.") == 1.0, "a sentence's last word alone, most often the answer, at the voice's pace"
    assert segment_speed("Oslo,") > 1.0 and segment_speed("is Oslo.") > 1.0


def test_the_embedded_voice_says_a_lone_word_in_less_time_than_at_its_own_pace():
    from tandem.speak.tts import HibariTTS

    tts = HibariTTS()
    own_pace = len(tts._tts("capital", seed=0))
    assert len(tts.synthesize("capital")) < 0.9 * own_pace
    sentence = "The capital of Australia is Canberra."
    assert len(tts.synthesize(sentence)) == len(tts._tts(sentence, seed=0))


class CountingTTS:
    """A repeatable engine (the same text, the same audio) that counts what it was asked to say."""

    sample_rate = SR
    repeatable = True

    def __init__(self, delay_s: float = 0.0):
        self.said: list[str] = []
        self.delay_s = delay_s

    def synthesize(self, text: str) -> np.ndarray:
        time.sleep(self.delay_s)
        self.said.append(text)
        return np.full(SR // 4, 0.1 + 0.01 * len(text), np.float32)


def wait_idle(v: Voicer) -> None:
    deadline = time.time() + 5
    while (v.synthesizing or v._warm) and time.time() < deadline:
        time.sleep(0.005)
    time.sleep(0.02)


def test_a_short_segment_voiced_before_plays_in_the_frame_it_is_asked_for():
    from tandem.speak.tts import FIRST_WORDS

    tts = CountingTTS()
    v = Voicer(tts)
    try:
        wait_idle(v)
        assert sorted(tts.said) == sorted(FIRST_WORDS), "the common first words are voiced while idle"
        v.say("The")
        audio, started = v.pull()
        assert started == ["The"] and audio.any(), "no frame waits for a synthesis"
        v.say("capital")
        audio, started = v.pull()
        assert started == [], "a word never voiced waits for its synthesis"
        wait_idle(v)
        v.pull(SR)
        v.say("capital")
        assert v.pull()[1] == ["capital"] and tts.said.count("capital") == 1
        assert v.cached == 2
        # a second Voicer of the same engine (the next session) shares what the first voiced
        w = Voicer(tts)
        try:
            w.say("capital")
            assert w.pull()[1] == ["capital"] and tts.said.count("capital") == 1
        finally:
            w.close()
    finally:
        v.close()


def test_a_cached_segment_keeps_its_place_behind_one_being_synthesized():
    tts = CountingTTS(delay_s=0.05)
    v = Voicer(tts)
    try:
        wait_idle(v)
        v.say("of Australia is")
        v.say("The")  # cached, but said after a segment still being synthesized
        heard = []
        deadline = time.time() + 5
        while len(heard) < 2 and time.time() < deadline:
            heard += v.pull()[1]
            time.sleep(0.01)
        assert heard == ["of Australia is", "The"]
    finally:
        v.close()


def test_an_engine_that_is_not_repeatable_is_never_cached():
    tts = CountingTTS()
    tts.repeatable = False
    v = Voicer(tts)
    try:
        for _ in range(2):
            v.say("The")
            wait_idle(v)
            assert v.pull(SR)[1] == ["The"]
        assert tts.said == ["The", "The"] and v.cached == 0
    finally:
        v.close()


def test_first_words_voiced_at_start_up_leave_the_first_voicer_nothing_to_do():
    from tandem.speak.tts import FIRST_WORDS, warm_first_words

    tts = CountingTTS()
    assert warm_first_words(tts) == len(FIRST_WORDS)
    assert warm_first_words(tts) == 0, "a second call finds them cached"
    v = Voicer(tts)
    try:
        assert not v._warm, "the Voicer's thread has no synthesis to do while the first session runs"
        v.say("The")
        assert v.pull()[1] == ["The"]
        assert sorted(tts.said) == sorted(FIRST_WORDS)
    finally:
        v.close()
    assert warm_first_words(FakeUnrepeatable()) == 0, "an engine whose audio varies is not cached"


class FakeUnrepeatable(CountingTTS):
    repeatable = False
