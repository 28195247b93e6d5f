"""Which transcripts stop inside a clause (the turn machine's user_unfinished state), and which do not."""
import json
from pathlib import Path

import pytest

from tandem.turn.unfinished import reads_unfinished


@pytest.mark.parametrize("text", [
    "My favorite kind of music is", "So what I was wondering is...", "I've been thinking about",
    "What would you say is?", "How many", "I was reading about.", "Tell me, um... Tell me, uh...",
    "We are planning a trip to", "I need a table for", "Could you tell me the", "I want tea and",
    "It's, like,", "Um, what's the, uh",
])
def test_words_that_ask_for_more(text):
    assert reads_unfinished(text)


@pytest.mark.parametrize("text", [
    "", "What is the capital of France?", "Where are you from?", "What is it made of?", "I think so.",
    "Tell me more.", "Yes, I do.", "How much?", "Who is it?", "I'd like to book.", "Thanks so much.",
    "What are you up to?", "Could you remind me?", "Wait, sorry, how many legs does an insect have...",
])
def test_whole_sentences_and_questions_are_not_held(text):
    assert not reads_unfinished(text)


def test_no_dev_question_or_dialogue_turn_is_held():
    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not data.exists():
        pytest.skip("the shared dev data is not beside this checkout")
    questions = [json.loads(line)["question"] for line in (data / "questions-dev.jsonl").read_text().splitlines() if line]
    turns = [t["say"] for line in (data / "dialogues-dev.jsonl").read_text().splitlines() if line
             for t in json.loads(line)["turns"]]
    assert [q for q in questions + turns if reads_unfinished(q)] == []
