"""The front-end's own words: what it says while the answer is on its way (an opener: "Well, good question.")
and when no answer came (a fallback). Training teaches them (train/synth.py); the LLM's history leaves them
out (llm/prompt.py), for they answer nothing, and a small LLM shown them says them again."""
from __future__ import annotations

import re

# only what the voice says right (tests/test_pronounce.py listens to each): hibari said "Hmm" as "home"
OPENERS = ["Let me think.", "Well, good question.", "Okay, let me see.", "Right, so."]
SHIPPED_OPENERS = ["Hmm, good question.", "Hmm,"]  # what the shipped compact checkpoint was trained on as well
FALLBACKS = ["Sorry, I am not sure about that.", "I don't know that one, sorry.", "Well, I am not certain."]
# how the scheduler ends a restated opening the LLM's reply could not go on with ("It is" + this)
OPENING_FALLBACK = "something I am not sure of, sorry."

# an opener's clauses, each of which the front-end also says alone ("Well," then the answer)
_PIECES = sorted({p.strip().lower() for o in OPENERS + SHIPPED_OPENERS for p in re.findall(r"[^,.]+[,.]", o)},
                 key=len, reverse=True)
_RUN = r"(?:(?:%s)\s*)+" % "|".join(re.escape(p) for p in _PIECES)
_LEADING = re.compile(r"^\s*" + _RUN, re.IGNORECASE)
_TRAILING = re.compile(r"(?:^|(?<=[.!?]))\s*" + _RUN + r"$", re.IGNORECASE)


def gave_up(reply: str) -> bool:
    """`reply` is, or ends in, a fallback: it says no answer was there."""
    low = " ".join(reply.lower().split())
    return any(f.lower().rstrip(".") in low for f in FALLBACKS + [OPENING_FALLBACK.split(",")[0]])


def without_openers(reply: str) -> str:
    """`reply` without the openers it begins with, and those after its last sentence (the next reply's
    opener, said before the user's next turn was heard): "Well, good question. It is Jupiter. Okay," is
    "It is Jupiter.". Shown them, a small LLM answered with openers only ("well, well,")."""
    return _TRAILING.sub("", _LEADING.sub("", reply)).strip()
