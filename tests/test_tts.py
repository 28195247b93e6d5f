"""The Voicer trims the silence a TTS puts around each segment: lead-in and tail are latency and gaps."""
import time

import numpy as np

from tandem.tts import PHRASE_TAIL_S, SENTENCE_TAIL_S, Voicer

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

    from tandem.tts import Voicer

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
    from tandem.tts import segment_speed

    assert segment_speed("capital") > segment_speed("of the") > segment_speed("is the largest") > 1.0
    assert segment_speed("The capital of Australia is Canberra.") == 1.0


def test_the_embedded_voice_says_a_lone_word_in_less_time_than_at_its_own_pace():
    from tandem.tts import HibariTTS

    tts = HibariTTS()
    own_pace = len(tts._tts("capital", seed=0))
    assert len(tts.synthesize("capital")) < 0.9 * own_pace
    sentence = "The capital of Australia is Canberra."
    assert len(tts.synthesize(sentence)) == len(tts._tts(sentence, seed=0))
