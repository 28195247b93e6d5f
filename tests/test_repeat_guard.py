"""The repeat guard: an earlier reply said again for another question is never passed on."""
import pytest

from tandem.llm.repeat_guard import RepeatGuard, earlier_replies

DIALOGUE = (("user", "What is the largest planet in the solar system?"),
            ("assistant", "The largest planet in the solar system is Jupiter. It is a gas giant."),
            ("user", "What is the capital of France?"),
            ("assistant", "The capital of France is Paris."))


def guarded(question: str, pieces: list[str], turns=DIALOGUE, partial: bool = True) -> tuple[str, bool]:
    g = RepeatGuard(earlier_replies(turns, question, partial))
    out = [g.push(p) for p in pieces] + [g.flush()]
    return "".join(out), g.stopped


@pytest.mark.parametrize("question, pieces, said, stopped", [
    # a partial of a new question answered with the reply before: nothing of it is passed on
    ("How many legs", ["The", " largest planet", " in the solar", " system is", " Jupiter", "."], "", True),
    ("How many legs", ["The capital of France is Paris", "."], "", True),
    # the same opening, then the reply of its own: held while it could be the old one, then passed on whole
    ("And of Germany?", ["The", " capital", " of", " Germany", " is Berlin."], "The capital of Germany is Berlin.", False),
    ("How many legs does a spider have?", ["A spider", " has 8 legs."], "A spider has 8 legs.", False),
    # "Paris" is a word of its own, "Pari" could still be the old one
    ("Where is the Louvre?", ["The capital of France is Pari", "sian", " art."], "The capital of France is Parisian art.", False),
    # the same question asked again may have the same answer, and so may its partial
    ("What is the capital of France?", ["The capital of France is Paris."], "The capital of France is Paris.", False),
    ("What is the capital", ["The capital of France is Paris."], "The capital of France is Paris.", False),
    ("What is the largest planet in this", ["The largest planet in the solar system is Jupiter."],
     "The largest planet in the solar system is Jupiter.", False),  # a partial's last word is still wrong
    # a reply that stops short of the old one is its own
    ("Tell me about space", ["The largest planet"], "The largest planet", False),
])
def test_repeat_guard(question, pieces, said, stopped):
    assert guarded(question, pieces) == (said, stopped)


def test_a_final_that_differs_in_its_last_word_is_another_question():
    pieces = ["The capital of France is Paris."]
    assert guarded("What is the capital of Germany?", pieces, partial=False) == ("", True)
    assert guarded("What is the capital of France?", pieces, partial=False) == ("The capital of France is Paris.", False)


def test_short_replies_may_be_the_same_twice():
    turns = (("user", "Which planet is the largest?"), ("assistant", "Jupiter."))
    assert guarded("And the heaviest?", ["Jupiter", "."], turns) == ("Jupiter.", False)


def test_with_no_earlier_reply_everything_passes_at_once():
    g = RepeatGuard(earlier_replies((), "What is it?"))
    assert g.push("The") == "The"


def test_a_guess_taken_back_is_no_earlier_reply():
    """The spider question's turn began with the planet's answer, taken back ("sorry,"): the planet question
    asked again later still gets its answer."""
    turns = (("user", "How many legs does a spider have?"),
             ("assistant", "The largest planet in the solar system is Jupiter. sorry, It has 8 legs."))
    answer = ["The largest planet in the solar system is Jupiter."]
    assert guarded("What is the largest planet in the solar system?", answer, turns, partial=False) == (answer[0], False)
