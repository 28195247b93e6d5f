"""Does a newer reply give the answer the oracle already holds, in other words? "It has 8 legs." and "A
spider has eight legs." do, and so do "It was written by William Shakespeare." and "It was written by
renowned English playwright William Shakespeare."; "It is New York City." and "It is Paris." do not. A
newer stream's reply that only rewords the answer being said would have the front-end take back what it
began ("It was written sorry, It was written by renowned ...", a third of the repairs in a loadtest) for
nothing, and say the answer a second later."""
from __future__ import annotations

import re

from ..bench.copying import key_words
from ..knowledge.query import content_words
from ..speak.numbers import spoken_tokens

_NEGATION = re.compile(r"\b(?:not|no|never|none|neither|nor)\b|n't\b", re.IGNORECASE)


def answer_words(text: str) -> set[str]:
    """The content words of `text`, numbers as spoken ("8" is "eight")."""
    return {s for w in content_words(text) for s in spoken_tokens(w)}


def same_answer(held: str, reply: str) -> bool:
    """`reply` says what `held` says, or less, or more of it: the content words of one hold the other's,
    and neither denies what the other does not. An answer with no content words ("It is") is none, and
    one that says more is the same only where `held` names its answer (a name or a number): to "It was
    written." or "It is a planet." the newer reply adds the answer itself."""
    a, b = answer_words(held), answer_words(reply)
    if not a or bool(_NEGATION.search(held)) != bool(_NEGATION.search(reply)):
        return False
    return b <= a or (a <= b and bool(key_words(held)))
