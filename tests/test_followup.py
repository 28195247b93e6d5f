"""Follow-up fragments rewritten as the question they stand for (tandem/think/followup.py)."""
from __future__ import annotations

import pytest

from tandem.turn.conversation import Conversation
from tandem.think.followup import current_question, is_fragment, resolved_questions, standalone, without_lead_in
from tandem.llm.prompt import answer_messages


@pytest.mark.parametrize("follow_up, previous, expected", [
    ("And the capital of Australia?", "What is the capital of Canada?", "What is the capital of Australia?"),
    ("And Australia?", "What is the capital of Canada?", "What is the capital of Australia?"),
    ("What about Germany?", "What is the capital of France?", "What is the capital of Germany?"),
    ("And the United States?", "What is the capital of Canada?", "What is the capital of the United States?"),
    ("And in Mexico?", "What language do people speak in Brazil?", "What language do people speak in Mexico?"),
    ("How about in 2014?", "Who won the World Cup in 2018?", "Who won the World Cup in 2014?"),
    ("And for dessert?", "What should I eat for dinner?", "What should I eat for dessert?"),
    ("And how many in a leap year?", "How many days are there in a year?", "How many days are there in a leap year?"),
    ("And how many oceans?", "How many continents are there?", "How many oceans are there?"),
    ("And its freezing point?", "What is the boiling point of water in Celsius?",
     "What is the freezing point of water in Celsius?"),
    ("And its currency?", "What is the capital of Egypt?", "What is the currency of Egypt?"),
    ("Right. And the second largest?", "What is the largest ocean on Earth?", "What is the second largest ocean on Earth?"),
    ("And the smallest?", "What is the largest planet in the solar system?", "What is the smallest planet in the solar system?"),
    ("And the second?", "What is the largest planet in the solar system?", "What is the second largest planet in the solar system?"),
    ("And the second?", "Who was the first president of the United States?", "Who was the second president of the United States?"),
    ("And the most famous one?", "Who is the richest person in the world?", "Who is the most famous person in the world?"),
    ("And an ant?", "How many legs does a spider have?", "How many legs does an ant have?"),
    ("And the Starry Night?", "Who painted the Mona Lisa?", "Who painted the Starry Night?"),
    ("And the grass?", "What color is the sky on a clear day?", "What color is the grass on a clear day?"),
])
def test_a_fragment_becomes_the_question_it_stands_for(follow_up: str, previous: str, expected: str) -> None:
    assert standalone(follow_up, previous) == expected


@pytest.mark.parametrize("utterance", [
    "Okay, and who painted Starry Night?",  # a question of its own
    "When was that?",  # a pronoun: left to the LLM, which has the history
    "What about you?",
    "Thanks.",
    "Mm-hmm.",
    "And the",  # still being said
    "and the capital of",
    "And in",
])
def test_what_is_no_fragment_or_cannot_be_placed_is_left_alone(utterance: str) -> None:
    assert standalone(utterance, "What is the capital of Canada?") is None


def test_no_previous_question_no_rewrite() -> None:
    assert standalone("And Australia?", None) is None
    assert standalone("And Australia?", "I like trains.") is None


def test_fragments_and_lead_ins() -> None:
    assert is_fragment("And in Mexico?") and is_fragment("the second largest")
    assert not is_fragment("And what color is grass?") and not is_fragment("Who painted it?")
    assert not is_fragment("Where's the station?")
    assert is_fragment("And in the United States?"), "a name ending in -ed is no verb"
    assert without_lead_in("Excuse me, what is the tallest mountain?") == "what is the tallest mountain?"
    assert without_lead_in("Sorry to cut in. How many hours are in a day?") == "How many hours are in a day?"
    assert without_lead_in("Okay, and, um, who wrote it?") == "who wrote it?"


def test_follow_ups_chain_and_skip_backchannels() -> None:
    turns = ["What language do people speak in Brazil?", "And in Mexico?", "Mm-hmm.", "And in Peru?"]
    assert resolved_questions(turns) == ["What language do people speak in Brazil?",
                                         "What language do people speak in Mexico?", "Mm-hmm.",
                                         "What language do people speak in Peru?"]
    assert current_question(turns[:3], "And Chile?") == "And what language do people speak in Chile?"


def test_the_conversation_knows_the_standalone_question_as_partial_and_as_final() -> None:
    conv = Conversation()
    conv.on_final("What is the capital of Canada?")
    conv.on_assistant("The capital of Canada is Ottawa.")
    assert conv.standalone_question() == "", "a first question stands alone"
    conv.on_partial("And of Australia")
    assert conv.earlier_user_turns() == ["What is the capital of Canada?"]
    assert conv.standalone_question() == "", "a partial may still go on: not resolved before it ends a sentence"
    conv.on_partial("And of Australia?")
    assert conv.standalone_question() == "And what is the capital of Australia?"
    conv.on_assistant("The")  # the reply begins before the final (tandem mode)
    conv.on_final("And of Australia?")
    assert conv.asking() == "And what is the capital of Australia?"
    conv.on_assistant("capital of Australia is Canberra.")
    assert conv.asking() == "And what is the capital of Australia?", "the last turn, answered, is still the one asked"


def test_the_prompt_asks_the_standalone_question_after_the_history() -> None:
    turns = [("user", "What is the capital of Canada?"), ("assistant", "Ottawa."), ("user", "And of Australia?")]
    chat = answer_messages(turns, asked="What is the capital of Australia?")
    assert [m["content"] for m in chat[1:]] == ["What is the capital of Canada?", "Ottawa.",
                                                "What is the capital of Australia?"]
    lines = answer_messages(turns, form="lines", asked="What is the capital of Australia?")
    assert lines[-1]["content"].endswith("user: What is the capital of Australia?")
    assert answer_messages(turns)[-1]["content"] == "And of Australia?"


def test_a_partial_is_no_fragment_before_it_ends_a_sentence() -> None:
    earlier = ["Can you explain how electricity works?"]
    assert current_question(earlier, "Never", heard_whole=False) is None
    assert current_question(earlier, "Never mind that. How many...", heard_whole=False) == "How many..."
    assert current_question(["What is the capital of Kenya?"], "saying...", heard_whole=True) is None, "cut off"
    assert without_lead_in("Never mind that. How many legs does a dog have?") == "How many legs does a dog have?"
    assert without_lead_in("Wait, a different question. What is the largest planet?") == "What is the largest planet?"
    assert without_lead_in("I like Paris. What is its population?") == "I like Paris. What is its population?"


def test_an_and_that_ties_a_turn_to_the_last_exchange_stays() -> None:
    assert current_question(["What is the largest ocean on Earth?"], "Right. And the second largest?") \
        == "And what is the second largest ocean on Earth?"
    assert current_question(["Who painted the Mona Lisa?"], "Okay, and who painted Starry Night?") \
        == "And who painted Starry Night?"
    assert current_question(["What color is the sky?"], "And what color is grass?") is None, "as it was said"


def test_a_whole_question_is_asked_without_its_lead_in() -> None:
    assert current_question(["Tell me about the ocean."], "Sorry to cut in how many hours are in a day?") \
        == "How many hours are in a day?"
    assert current_question([], "Hold on, stop. What is the capital of Egypt?") == "What is the capital of Egypt?"
    assert current_question([], "What is the capital of Egypt?") is None, "nothing to take away"
    assert current_question([], "Okay.") is None and current_question([], "Yeah, sure.") is None


def test_the_request_carries_the_turn_as_heard_and_as_asked() -> None:
    conv = Conversation()
    conv.on_final("Tell me everything about the ocean.")
    conv.on_assistant("The ocean is a vast")
    conv.on_final("Sorry to cut in. How many hours are in a day?")
    assert conv.current_user_text() == "Sorry to cut in. How many hours are in a day?"
    assert conv.asking() == "How many hours are in a day?"


def test_the_as_heard_variant_asks_every_turn_as_it_was_said() -> None:
    from tandem.bench.common import session_config

    conv = Conversation(standalone=False)
    conv.on_final("What is the capital of Canada?")
    conv.on_assistant("Ottawa.")
    conv.on_final("And of Australia?")
    assert conv.standalone_question() == "" and conv.asking() == "And of Australia?"
    assert session_config("cascade-as-heard").scheduler.standalone is False
    assert session_config("tandem").scheduler.standalone is True
