"""Is the user telling at length? Statement after statement, no question: a pause there is a breath.

A listener who has heard two statements in a row and no question ("I started a vegetable garden this spring.
The tomatoes came up first.") takes the next pause for a breath, not a turn end: they wait for what the
words say (a sentence that closes the story, a question) before they take the floor, and meanwhile say at
most "mm-hmm". The tandem's front-end takes its turn 0.1-0.2 s after the voice stops, before the pause's
transcript (0.2-0.35 s) and the turn-end judge's reading of it (20-130 ms); a first word from the phrase
cache is heard in its own frame, so a reply begun there could not be withdrawn: under FDB's stories the
tandem said "I'm sorry. I'm sorry for the..." in their pauses (docs/notes/full-duplex-bench.md). In a
telling the turn machine holds the floor for the user from the second statement on (its `user_telling`
state): only the reading of the pause, or the hold's limit, gives it to the assistant. A question ends the
telling as soon as a transcript shows it, so that its answer is as quick as any question's.
"""
from __future__ import annotations

import re

MIN_STATEMENTS = 2  # whole statements, in a row since the assistant's last reply
MIN_WORDS = 12  # and this many words: "Hi. Thanks." is no story
MIN_UNDER_WAY_WORDS = 3  # a sentence still being said counts as a statement this many words in
_SENTENCE = re.compile(r"[^.!?]*[A-Za-z0-9][^.!?]*[.!?]+")
# a question's first word, for a sentence Whisper left without its mark
_ASKS_FIRST = frozenset("what which who whom whose where when why how is are was were am do does did can could will "
                        "would should shall may might have has".split())


def closed(final: str) -> str:
    """A final transcript as the sentence it is: the Listener's endpoint ends it, where Whisper often writes no
    mark (festival's and flite's voices: "yesterday my train to work was cancelled"). A question's mark where it
    begins as a question does, a full stop elsewhere; a mark already there stays."""
    text = final.strip()
    if not text or text[-1] in ".!?" or not re.search(r"[A-Za-z0-9]", text):
        return text
    first = re.match(r"[a-z']+", text.lower())
    return text + ("?" if first and first.group() in _ASKS_FIRST else ".")


def sentences(text: str) -> list[str]:
    """The whole sentences of `text`, each with its closing marks (the unfinished tail left out)."""
    return [s.strip() for s in _SENTENCE.findall(text)]


def tells_at_length(told: str, cut: bool = False) -> bool:
    """The user's words since the assistant's last reply are a telling: MIN_STATEMENTS statements or more (the
    sentence under way counts once MIN_UNDER_WAY_WORDS words in), MIN_WORDS words, and the last whole sentence
    is no question. `cut`: the last mark is where the audio was cut (the Listener's `said_more`), and ends no
    sentence: that one is still under way."""
    whole = list(_SENTENCE.finditer(told))
    if cut and whole and not told[whole[-1].end():].strip():
        whole = whole[:-1]
    if not whole or whole[-1].group().rstrip().endswith("?"):
        return False
    statements = sum(not m.group().rstrip().endswith("?") for m in whole)
    # the sentence under way counts once it is a few words in: the second statement is held before its pause
    # (as a whole sentence it is seen only at its pause's transcript, after the front-end has begun)
    under_way = len(told[whole[-1].end():].split()) >= MIN_UNDER_WAY_WORDS
    return statements + under_way >= MIN_STATEMENTS and len(told.split()) >= MIN_WORDS


def asks(text: str) -> bool:
    """The transcript ends with a question: the telling is over, and the question is answered as any is."""
    return text.rstrip().endswith("?")
