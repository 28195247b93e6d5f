"""What an LLM writes for the eye and a voice does not say: list numbers, bullets, heading marks, emphasis.

SmolLM2 answers "What are some good ways to sleep better?" with "1. \\nSleep better by...": the voice
said "1." and, the next words still on their way, the reply ended there (FDB dev set). A list number
that begins a sentence (at the reply's start, a line's start, or after a word that ends a sentence) is
markup when another word follows it; alone it is an answer ("How many moons has the Earth?" "1."), so
it is held until the next word shows which.
"""
from __future__ import annotations

import re

_NUMBER = re.compile(r"\d{1,2}[.)]")  # "1.", "2)"
_BULLET = re.compile(r"[-*•]|#{1,6}")  # "-", "*", "•", "##"
_EMPHASIS = re.compile(r"\*\*|__|`")
_ENDS_SENTENCE = re.compile(r"[.!?:]['\")\]]*$")


class SpokenWords:
    """A reply's words, in order, less its markup. Feed it text as it streams (`push`, whole words
    only), then `flush` at the reply's end."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._begins = True  # the next word begins a sentence
        self._held = ""  # a list number, said only if nothing follows it

    def push(self, text: str) -> str:
        out = []
        for i, line in enumerate(text.split("\n")):
            self._begins |= i > 0
            for raw in line.split():
                word = _EMPHASIS.sub("", raw)
                if not word:
                    continue
                begins, self._begins = self._begins, bool(_ENDS_SENTENCE.search(word))
                if begins and _BULLET.fullmatch(word):
                    self._begins = True
                    continue
                if begins and _NUMBER.fullmatch(word):
                    self._held, self._begins = word, True
                    continue
                self._held = ""
                out.append(word)
        return " ".join(out)

    def flush(self) -> str:
        held, self._held = self._held, ""
        self._begins = True
        return held


def spoken(text: str) -> str:
    """The whole of a finished text as said."""
    words = SpokenWords()
    return " ".join(w for w in (words.push(text), words.flush()) if w)
