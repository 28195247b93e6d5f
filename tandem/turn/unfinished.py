"""Does the user's turn, as heard so far, stop inside a clause? End-of-turn evidence beyond silence.

A speaker who pauses after "My favourite kind of music is", "I've been thinking about", "How many" or "Tell
me, um," has not finished: the last word asks for more (a linking verb, a preposition, an article, a
conjunction, a possessive, a quantifier with no noun, a filler), or it stops at a comma or a dash. A listener
keeps quiet there however long the silence; the turn machine's `user_unfinished` state does the same
(turn/machine.py). Only the last word is read, and only words that seldom end an English sentence count; a
question may end on its preposition ("Where are you from?"). What it misses ("I'd like to book.", "Can you
tell me?") is left to the turn-end judge (turn/reading.py), or to silence; what it holds by mistake gets its
reply at the hold's limit, not in the user's pause.
"""
from __future__ import annotations

import re

# words after which a clause cannot end (left out: the ones that often end one: "I think so.", "Yes, I do.",
# "Tell me more.", "Come in.", "Do you know why?", "I gave it to her.", "It could be.")
CONTINUES = frozenset("""
a an the my your its our their every each
of to at for with about from into onto between through during without within
and or but because if although whether nor than as
is are was were am
um uh er erm
""".split())
# a question may end on its preposition ("Where are you from?", "What is it made of?"): its question mark says so
STRANDED = frozenset("of to at for with about from into onto between through like".split())
# a clause cut at its comma or dash. Not Whisper's trailing "...": it writes it for a voice that slows as much as
# for one cut off ("Wait, sorry, how many legs does an insect have..."), so there the words decide
TRAILS_OFF = re.compile(r"(,|-)\s*$")
HOW_MANY = re.compile(r"\bhow (many|much)\W*$", re.I)  # a quantity with no noun yet


def last_word(text: str) -> str:
    words = re.findall(r"[a-z']+", text.lower())
    return words[-1] if words else ""


def reads_unfinished(text: str) -> bool:
    """The transcript stops inside a clause: its last word asks for more, or it trails off ("...", ",")."""
    text = text.strip()
    if not text:
        return False
    if TRAILS_OFF.search(text) or (HOW_MANY.search(text) and not text.endswith("?")):
        return True
    word = last_word(text)
    return word in CONTINUES and not (text.endswith("?") and word in STRANDED)
