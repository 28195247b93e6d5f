"""What a reply may say before its answer is settled: nothing it may have to take back.

The tandem takes its turn 0.1-0.3 s after the user's voice stops; the Listener's final transcript comes
0.5 s after, and the oracle answers it ("settled", UserFrame.oracle_settled) a frame or two later. Until
then the oracle holds the LLM's answer to a partial transcript, and every audible self-repair of the dev
questions came from words said from it: "It is not a place, but, sorry, it is Buenos Aires." (the partial
was "...the capital of Arden Dean?"), "In 1945, sorry, the end of World War II", "I'm, sorry, the answer
is blue." A listener hears each as a stumble; the cascade, which waits for the final, makes none.

`CommitGate` lets a reply begin and go on before the answer settles only with words that commit to
nothing: the openings of a statement ("It is", "There are", "The") and the user's own words restated
("The capital of France is"). At any other word the front-end waits (fed silence, as it waits for an
oracle's next word) until the answer settles, for at most MAX_COMMIT_WAIT_FRAMES: a stream that never
settles (an LLM gone mid-answer) must not silence the reply. The reply's first sound is as early as
before; its first fact waits for the answer to the final, which it mostly did already (the answer word
came 1.08 s after the voice stopped, the settled answer 0.62 s, medians of the 80 dev questions).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from ...speak.numbers import spoken_tokens

# a statement's opening: says what kind of sentence follows, not what it says
OPENING_WORDS = frozenset("it it's its the a an there they this that these those he she is are was were has have "
                          "had of".split())
# the user's words that a restated answer does not begin with: their question's frame, and words that commit
# to a kind of reply ("I'm", "not")
NOT_RESTATED = frozenset("in on at to for from by with about what which who whom whose where when why how do does "
                         "did can could would will i i'm me my you your not no yes please tell".split())
CLAUSE_MARKS = set(",.;:!?")
MAX_COMMIT_WAIT_FRAMES = 25  # 2 s: longer than a final and its answer take with the embedded LLM (0.6 s)
MIN_PREFIX = 2  # a word's first piece counts as a restated word when it begins one of the user's (two letters at least)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9']", "", text.lower())


def restatable(user_text: str) -> set[str]:
    """The user's words a reply may restate before its answer settles, in spoken form ("2" is "two")."""
    words = {t for w in user_text.split() for t in spoken_tokens(_norm(w)) if t}
    return words - NOT_RESTATED


@dataclass
class CommitGate:
    piece_text: Callable[[int], str]  # a word-start piece's text, as the tokenizer decodes it
    waited: int = 0  # frames in a row the reply has waited for its answer to settle
    holds_total: int = 0  # frames held, over the session
    _user_text: str = ""
    _restatable: set[str] = field(default_factory=set)

    def safe(self, piece: int, user_text: str) -> bool:
        """A word beginning with `piece` commits to nothing the settled answer may take back."""
        text = self.piece_text(piece).strip()
        w = _norm(text)
        if not w:  # a clause's mark goes with the words before it; a sign begins a fact ("-40", "$5", "(JPY)")
            return bool(text) and all(c in CLAUSE_MARKS for c in text)  # a bare space piece begins "-4"
        if w in OPENING_WORDS:
            return True
        if user_text != self._user_text:
            self._user_text, self._restatable = user_text, restatable(user_text)
        spoken = spoken_tokens(w)[0]
        return len(spoken) >= MIN_PREFIX and any(u.startswith(spoken) for u in self._restatable)

    def holds(self, piece: int, user_text: str, settled: bool, answer_fed: bool) -> bool:
        """Wait this frame instead of beginning the word `piece`? Only while an answer has been fed and is
        not settled, for a word that is not `safe`, and not longer than MAX_COMMIT_WAIT_FRAMES."""
        if settled or not answer_fed:
            self.waited = 0
            return False
        if self.safe(piece, user_text) or self.waited >= MAX_COMMIT_WAIT_FRAMES:
            return False
        self.waited += 1
        self.holds_total += 1
        return True

    def resumed(self) -> None:
        """The held reply went on with the settled answer's next word (decoding.resume_piece)."""
        self.waited = 0


__all__ = ["CommitGate", "MAX_COMMIT_WAIT_FRAMES", "NOT_RESTATED", "OPENING_WORDS", "restatable"]
