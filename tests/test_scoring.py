"""The benchmark's scoring on constructed audio whose onsets and words are known."""
import numpy as np
import pytest

from tandem.audio.frames import SAMPLE_RATE
from tandem.bench.scoring import Transcriber, Word, find_answer, hear, listening_context, onset_after, speech_end_of

SR = SAMPLE_RATE


def tone(seconds: float, amp: float = 0.3) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * 220 * np.arange(int(seconds * SR)) / SR)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SR), np.float32)


def test_speech_end_and_onset_latency_on_known_signals():
    user = np.concatenate([silence(0.5), tone(1.5), silence(0.02) + 1e-4, silence(2.0)])  # hiss stays below
    end = speech_end_of(user)
    assert end == pytest.approx(2.0, abs=0.002)
    assistant = np.concatenate([silence(2.0 + 0.45), tone(1.0), silence(0.5)])
    assert onset_after(assistant, end) == pytest.approx(0.45, abs=0.002)
    assert onset_after(silence(3.0), end) is None
    assert speech_end_of(silence(1.0)) is None


def test_onset_ignores_assistant_sound_before_the_end_of_speech():
    assistant = np.concatenate([tone(0.3), silence(1.7), silence(0.2), tone(0.5)])
    assert onset_after(assistant, 2.0) == pytest.approx(0.2, abs=0.002)


@pytest.fixture(scope="module")
def transcriber():
    return Transcriber(threads=1)


def test_answer_time_comes_from_the_spoken_word(transcriber):
    from tandem.audio.voices import speak

    lead = 1.5
    speech = speak("I believe the capital is Paris.", "espeak", lead_s=lead, tail_s=0.5)
    words = transcriber.words(speech)
    hit = find_answer(words, ["paris"], after=lead - 0.1)
    assert hit is not None, [w.text for w in words]
    spoken_end = speech_end_of(speech)
    # "Paris" is the last word: it starts after the lead and well after the first word, ends by the end
    assert lead + 0.6 < hit.start < spoken_end and hit.end <= spoken_end + 0.3
    assert find_answer(words, ["paris"], after=spoken_end + 0.5) is None, "said before `after` does not count"
    assert find_answer(words, ["london"]) is None


def test_numbers_match_in_their_spoken_form():
    heard = [Word("within", 1.0, 1.3), Word("40,", 1.3, 1.6), Word("five", 1.6, 1.9), Word("days", 1.9, 2.2)]
    hit = find_answer(heard, ["45"])
    assert hit is not None and (hit.start, hit.end) == (1.3, 1.9)
    assert find_answer(heard, ["forty-five"]) is not None
    assert find_answer([Word("45", 0.0, 0.4)], ["forty five"]) == Word("45", 0.0, 0.4), "one word spoken as two"
    assert find_answer(heard, ["forty"]) is not None and find_answer(heard, ["44"]) is None


def test_a_symbol_spelled_out_letter_by_letter_is_heard():
    heard = [Word("It", 0.0, 0.2), Word("is", 0.2, 0.4), Word("A", 0.5, 0.7), Word("-U.", 0.7, 0.9)]
    assert find_answer(heard, ["au"]) == Word("A -U.", 0.5, 0.9)
    assert find_answer([Word("AU.", 0.5, 0.9)], ["au"]) is not None
    assert find_answer([Word("a", 0.0, 0.1), Word("unit", 0.2, 0.5)], ["au"]) is None
    assert find_answer([Word("O", 0.0, 0.1), Word("S", 0.2, 0.5), Word("L", 0.5, 0.6), Word("O", 0.6, 0.7)],
                       ["oslo"]) is None, "only short symbols: a word is not heard as its letters"


@pytest.mark.parametrize("reply,question,answer", [
    ("It is flour.", "What is the main ingredient in bread?", "flour"),
    ("It is Seoul.", "What is the capital of South Korea?", "seoul"),
])
def test_a_short_answer_is_heard_as_a_listener_who_asked_hears_it(transcriber, reply, question, answer):
    """The assistant's own voice saying a short answer: Whisper alone wrote "flower" and "so" here; given
    the question as the listener's context it hears the answer."""
    from tandem.speak.tts import HibariTTS

    audio = np.concatenate([silence(0.5), np.asarray(HibariTTS().synthesize(reply), np.float32), silence(0.5)])
    context = listening_context(question, [answer])
    assert context == question
    assert find_answer(transcriber.words(audio, context), [answer]) is not None


def test_no_context_when_the_question_holds_an_accepted_answer():
    assert listening_context("Is the capital of France Paris or Lyon?", ["Paris"]) is None
    assert listening_context("What do bees make?", ["honey"]) == "What do bees make?"
    assert listening_context("", ["x"]) is None


class FakePromptCopier:
    """A Whisper that writes its prompt over the reply when it has one (what it did over a cut reply)."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[str | None] = []

    def words(self, audio, context=None):
        self.calls.append(context)
        text = context if context else self.reply
        return [Word(w, 0.1 * i, 0.1 * i + 0.1) for i, w in enumerate(text.split())]


def test_hearing_with_the_question_adds_answers_and_never_takes_one_away():
    copier = FakePromptCopier("It is Jupiter.")
    q = "Sorry, what is the largest planet?"
    heard = hear(copier, np.ones(10, np.float32), ["jupiter"], q)
    assert [w.text for w in heard] == ["It", "is", "Jupiter."], "the prompted transcript missed it: Whisper alone"
    assert copier.calls == [q, None]

    class Hears:  # prompted: the answer; alone: a homophone
        def words(self, audio, context=None):
            return [Word("flour." if context else "flower.", 0.0, 0.3)]

    assert [w.text for w in hear(Hears(), np.ones(10, np.float32), ["flour"], "What is in bread?")] == ["flour."]
    assert [w.text for w in hear(Hears(), np.ones(10, np.float32), ["flour"], None)] == ["flower."]


def test_word_times_are_snapped_to_the_sound_inside_them():
    """Whisper tiny stretches a first word over the silence before it: Full-Duplex-Bench would count a
    "Mm-hmm" at 1.5-2.0 s, timed 0.0-2.0 s, as taking the turn (a word over 1 s)."""
    from tandem.bench.scoring import Word, snapped_to_sound

    audio = np.zeros(24000 * 4, np.float32)
    audio[int(1.5 * 24000): int(2.0 * 24000)] = 0.3
    audio[int(3.0 * 24000): int(3.4 * 24000)] = 0.3
    got = snapped_to_sound([Word("Mom.", 0.0, 2.0), Word("Yes.", 2.6, 2.9)], audio)
    assert got[0] == Word("Mom.", 1.5, 2.0), "shrunk to the sound in its span"
    assert got[1] == Word("Yes.", 3.0, 3.3), "no sound in its span: the next sound, no longer than the span"
    assert snapped_to_sound([Word("Hm.", 0.0, 1.0)], np.zeros(24000, np.float32)) == [Word("Hm.", 0.0, 1.0)]
