"""A reply's list markup is not said; a number that answers is."""
import pytest

from tandem.speak.markup import SpokenWords, spoken
from tandem.think.oracle import WordBuffer
from tandem.turn.cascade import SentenceChunker


@pytest.mark.parametrize("text,said", [
    ("1. \nSleep better by waking up earlier.", "Sleep better by waking up earlier."),
    ("1. Water: keep it moist. 2. Light: bright but not direct.", "Water: keep it moist. Light: bright but not direct."),
    ("- eggs\n- rice\n* milk", "eggs rice milk"),
    ("## Steps\n**Mix** the flour.", "Steps Mix the flour."),
    ("1.", "1."),  # an answer: nothing follows it
    ("It is 2. The next is 3.", "It is 2. The next is 3."),  # numbers inside sentences are said
    ("There are 7 days in a week.", "There are 7 days in a week."),
])
def test_what_is_said_of_a_reply(text, said):
    assert spoken(text) == said


def test_a_list_number_is_held_until_the_next_word_shows_it_is_markup():
    words = SpokenWords()
    assert words.push("1.") == ""
    assert words.push("Sleep well.") == "Sleep well."
    assert words.flush() == ""
    assert words.push("2.") == "" and words.flush() == "2.", "alone, it was the answer"


def test_the_oracles_words_and_the_cascades_sentences_leave_out_the_same_markup():
    buf = WordBuffer()
    streamed = [buf.push(chunk) for chunk in ["1", ".", " \n", "Sleep", " better", ". 2", ".", " Read", "."]]
    assert " ".join(w for w in streamed + [buf.flush()] if w) == "Sleep better. Read."
    chunker = SentenceChunker()
    sentences = [s for chunk in ["1", ".", " \n", "Sleep", " better", ". 2", ".", " Read", "."] for s in chunker.push(chunk)]
    assert sentences + chunker.flush() == ["Sleep better.", "Read."]
