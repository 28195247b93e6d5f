"""Openings restated from questions, and LLM replies spliced onto them."""
import pytest

from tandem.think.restate import Splicer, restate, splice


@pytest.mark.parametrize("question, opening", [
    ("What is the capital of Thailand?", "The capital of Thailand is"),
    ("what's the capital city of Peru", "The capital city of Peru is"),
    ("Um, so what is the longest river in Asia?", "The longest river in Asia is"),
    ("Can you tell me what the capital of Chile is?", None),  # a shape it does not know
    ("Who wrote War and Peace?", "War and Peace was written by"),
    ("who invented the light bulb", "The light bulb was invented by"),
    ("Who was the first woman in space?", "The first woman in space was"),
    ("How many moons does Mars have?", "Mars has"),
    ("How many planets are there in the solar system?", "There are"),
    ("How tall is the Eiffel Tower?", "The Eiffel Tower is"),
    ("Where is Machu Picchu?", "Machu Picchu is"),
    ("What is the capital of", None),  # a partial that stops mid-question
    ("What is the capital?", None),  # too little to say
    ("Tell me a joke.", None),
    ("Who wrote it?", None),  # a pronoun: the opening would say nothing
    ("", None),
    ("who invented the", None),  # a partial cut off after its article: "The was invented by" said nothing
    ("who discovered penicillin", "Penicillin was discovered by"),
])
def test_restate(question, opening):
    assert restate(question) == opening


@pytest.mark.parametrize("opening, question, reply, spliced", [
    ("The capital of Thailand is", "What is the capital of Thailand?", "The capital of Thailand is Bangkok.",
     "The capital of Thailand is Bangkok."),
    ("The capital of Thailand is", "What is the capital of Thailand?", "Bangkok is the capital of Thailand.",
     "The capital of Thailand is Bangkok."),
    ("The capital of Thailand is", "What is the capital of Thailand?", "Bangkok. It is a big city.",
     "The capital of Thailand is Bangkok. It is a big city."),
    ("Mars has", "How many moons does Mars have?", "Mars has two moons, Phobos and Deimos.",
     "Mars has two moons, Phobos and Deimos."),
    ("The square root of sixty four is", "What is the square root of sixty four?", "The square root of 64 is 8.",
     "The square root of sixty four is 8."),
    ("There are", "How many planets are there in the solar system?", "The solar system has eight planets.",
     "There are eight."),
    ("The capital of Thailand is", "What is the capital of Thailand?", "The capital of Thailand.", None),
    # about something else: spliced, it would say "The capital of Portugal is Europe."
    ("The capital of Portugal is", "What is the capital of Portugal?", "Portugal is a country in Europe.", None),
    ("The capital of Thailand is", "What is the capital of Thailand?", "It's Bangkok.",
     "The capital of Thailand is Bangkok."),
    # an opening that names nothing goes on with a number or a name only, and "I" is no name
    ("There are", "How many hours are in a day?", "I'm sorry to cut in on the hours, but I can't help it.", None),
    ("There are", "How many hours are in a day?", "A day has 24 hours.", "There are 24."),
    # a list's number is no answer (a reply in the list form of the last one)
    ("Romeo and Juliet was written by", "Who wrote Romeo and Juliet", "1. William Shakespeare",
     "Romeo and Juliet was written by William Shakespeare."),
    # the opening made short ("It is") goes on after a reply that restates the subject in full: its answer
    # may be a common noun, which the rules above would not take for one
    ("It is", "What is the largest animal in the ocean?", "The largest animal in the ocean is the blue whale.",
     "It is the blue whale."),
    ("It has", "How many legs does a spider have?", "A spider has 8 legs. They use them to walk.",
     "It has 8 legs. They use them to walk."),
    ("It is", "What is the capital of Portugal?", "Portugal is a country in Europe.", "It is Europe."),  # as before
    # SmolLM2's replies to "Who wrote the play Romeo and Juliet?" asked cold, one request at a time and in a
    # batch: the name is the answer, not the words that describe it ("It was written by renowned French
    # playwright." before)
    ("It was written by", "Who wrote the play Romeo and Juliet?",
     "The play Romeo and Juliet by William Shakespeare was written by the renowned French playwright, William Shakespeare.",
     "It was written by William Shakespeare."),
    ("It was written by", "Who wrote the play Romeo and Juliet?",
     "The play Romeo and Juliet by William Shakespeare was written by the renowned French playwright and poet, "
     "William Shakespeare.", "It was written by William Shakespeare."),
    ("It was written by", "Who wrote the play Romeo and Juliet?",
     "The play Romeo and Juliet by William Shakespeare was written by the renowned French playwright and poet.",
     "It was written by William Shakespeare."),
    # a comma ends the answer: "not Sydney" is no part of it
    ("It is", "What is the capital of Australia?", "It's Canberra, not Sydney.", "It is Canberra."),
])
def test_splice(opening, question, reply, spliced):
    assert splice(opening, question, reply) == spliced


def test_splicer_passes_what_follows_an_agreeing_opening_as_it_streams():
    s = Splicer("The capital of Thailand is", "What is the capital of Thailand?")
    out = [s.push(p) for p in ["The", " capital", " of", " Thailand", " is", " Bangkok", "."]] + [s.flush()]
    assert out[:5] == [""] * 5, "held until it is clear the reply begins with the opening"
    assert out[5] == "Bangkok", "then released at once, not at the sentence end"
    assert "".join(out) == "Bangkok." and not s.replaces and s.continued


def test_splicer_goes_on_at_once_after_a_reply_that_restates_what_a_short_opening_said_as_it():
    s = Splicer("It is", "What is the largest animal in the ocean?")
    out = [s.push(p) for p in ["The", " largest", " animal", " in", " the", " ocean", " is", " the", " blue", " whale", "."]]
    assert "".join(out[:7]) == "", "held until the full subject and its verb are heard"
    assert out[7] == "the", "then released at once, not at the sentence end"
    assert "".join(out) + s.flush() == "the blue whale." and not s.replaces


def test_splicer_waits_for_the_first_sentence_of_a_reply_in_another_order():
    s = Splicer("The capital of Thailand is", "What is the capital of Thailand?")
    out = [s.push(p) for p in ["Bangkok", " is", " the", " capital", " of", " Thailand", ".", " It", " is", " big."]]
    assert "".join(out[:6]) == ""
    assert "".join(out) + s.flush() == "Bangkok. It is big." and not s.replaces


def test_splicer_flushes_an_unfinished_reply_at_the_end_of_the_stream():
    s = Splicer("The capital of Thailand is", "What is the capital of Thailand?")
    assert s.push("Bangkok") == ""
    assert s.flush() == "Bangkok."


def test_a_reply_that_cannot_be_spliced_replaces_the_opening():
    s = Splicer("The capital of Thailand is", "What is the capital of Thailand?")
    out = s.push("The capital of Thailand.") + s.flush()
    assert out == "The capital of Thailand." and s.replaces


def test_an_empty_reply_continues_nothing():
    s = Splicer("The capital of Thailand is", "What is the capital of Thailand?")
    assert s.flush() == "" and not s.continued


def test_the_users_words_about_themselves_are_said_back_in_the_second_person():
    assert restate("How many days do I have") == "You have"
    assert restate("How many settings does my kettle have?") == "Your kettle has"
    assert restate("Where is my order?") == "Your order is"
    assert restate("What is the capital of France?") == "The capital of France is", "no pronoun, no change"


def test_the_splicer_skips_a_list_number_the_reply_opens_with():
    s = Splicer("Romeo and Juliet was written by", "Who wrote Romeo and Juliet")
    out = [s.push(p) for p in ["1", ".", " William", " Shakespeare"]] + [s.flush()]
    assert "".join(out) == "William Shakespeare." and not s.replaces


@pytest.mark.parametrize("question, short", [
    ("Who wrote the play Romeo and Juliet?", "It was written by"),
    ("What is the largest planet in the solar system?", "It is"),
    ("Who painted the Mona Lisa?", "It was painted by"),
    ("What is the capital of Thailand?", "It is"),
    ("How many legs does a spider have?", "It has"),
    ("How many moons do the planets of the solar system have?", "The planets of the solar system have"),  # plural
])
def test_a_long_opening_says_its_subject_as_it_when_asked_short(question, short):
    assert restate(question, short=True) == short


def test_a_question_whisper_marks_as_cut_off_is_not_restated():
    """Seen live: "What is the capital of each..." (of Egypt) was restated "It is", which fits any subject, and
    the reply to the cut question ("...the capital of Italy is Rome.") was said before the repair."""
    for q in ("What is the capital of each...", "What is the capital of Aust-", "Who wrote Romeo and Jul…"):
        assert restate(q) is None and restate(q, short=True) is None
    assert restate("What is the capital of Egypt?", short=True) == "It is"


@pytest.mark.parametrize("question, short", [
    ("What is the capital of Thailand?", "It is"),
    ("How many legs does a spider have?", "It has"),
    ("Who painted the Mona Lisa?", "It was painted by"),
    ("How many moons do the planets of the solar system have?", "The planets of the solar system have"),  # plural
])
def test_the_length_said_short_is_a_setting(question, short):
    assert restate(question, short=True, short_words=2) == short
    assert restate(question, short=False, short_words=2) == restate(question), "only when asked short"
    assert restate("What is the capital of Thailand?", short=True, short_words=5) == "The capital of Thailand is"
