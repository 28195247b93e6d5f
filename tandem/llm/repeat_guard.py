"""Stops an oracle that says an earlier reply of the dialogue again, for another question.

A small LLM shown the dialogue so far often answers the start of a new question ("How many legs",
a partial transcript) with its previous reply ("The largest planet in the solar system is Jupiter."):
the words closest to hand. Fed to the front-end, the previous answer is read out for the new
question. The guard holds a reply back while it is word for word the opening of an earlier reply,
passes it on as soon as it differs ("The capital of" ... "Germany" after "The capital of France is
Paris."), and ends it, with nothing passed on, once it has said an earlier reply's whole first
sentence. The same question asked again may get the same answer: replies to a user turn that the
current question repeats, or is the beginning of, are not held against it. First sentences of fewer
than MIN_WORDS words ("Jupiter.") are left alone: a short answer can rightly be the same twice.
"""
from __future__ import annotations

import re

from .prompt import as_repaired

MIN_WORDS = 4
_WORD = re.compile(r"[a-z0-9']+")
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _first_sentence(text: str) -> str:
    m = _SENTENCE_END.search(text)
    return text[: m.start()] if m else text


def _same_question(earlier: list[str], asked: list[str], partial: bool) -> bool:
    """One is the other, or the beginning of it (a partial of the same question). A partial's last
    word is left out: it is the one a partial still gets wrong ("in this" for "in the")."""
    asked = asked[:-1] if partial and len(asked) > 2 else asked
    n = min(len(earlier), len(asked))
    return n > 0 and earlier[:n] == asked[:n]


def earlier_replies(turns: tuple[tuple[str, str], ...] | list[tuple[str, str]], question: str,
                    partial: bool = False) -> list[list[str]]:
    """The first sentences (as words) of the dialogue's assistant replies to other questions than
    `question` (`partial`: it is still being said)."""
    asked = _words(question)
    out: list[list[str]] = []
    last_user: list[str] = []
    for role, text in turns:
        if role == "user":
            last_user = _words(text)
        elif role == "assistant":
            # as the reply was left: a guess taken back ("The largest planet ... is Jupiter. sorry, It has 8
            # legs.") was no reply to its question, and cut the next question's right answer as a repeat
            words = _words(_first_sentence(as_repaired(text)))
            if len(words) >= MIN_WORDS and not _same_question(last_user, asked, partial):
                out.append(words)
    return out


class RepeatGuard:
    def __init__(self, earlier: list[list[str]]) -> None:
        self._earlier = earlier
        self._held = ""
        self._released = not earlier
        self.stopped = False

    def push(self, delta: str) -> str:
        """The text that may be passed on now; `stopped` once an earlier reply was said again."""
        if self.stopped:
            return ""
        if self._released:
            return delta
        self._held += delta
        words = _words(self._held)
        complete = words if self._held[-1:] and not self._held[-1:].isalnum() else words[:-1]
        partial = "" if len(complete) == len(words) else words[-1]
        alive = [e for e in self._earlier if e[: len(complete)] == complete
                 and (not partial or (len(e) > len(complete) and e[len(complete)].startswith(partial)))]
        if any(len(complete) >= len(e) for e in alive):
            self.stopped = True
            self._held = ""
            return ""
        if alive:
            return ""
        self._released = True
        out, self._held = self._held, ""
        return out

    def flush(self) -> str:
        """At the end of the stream: a reply that stopped short of an earlier one is its own."""
        out, self._held = ("" if self.stopped else self._held), ""
        return out
