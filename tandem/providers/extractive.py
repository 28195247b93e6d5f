"""A direct answer: when a sentence of a retrieved passage matches the question closely, that
sentence is the oracle, at once, with no LLM. "How much does express delivery cost?" is answered by
"Express delivery arrives the next working day and costs twelve dollars." a few milliseconds after
the words were heard, where the LLM would take a few hundred (and a small one may get it wrong).

A sentence matches when it (with its section's heading, at half weight) holds most of the question's
content words, two of them itself at least, and brings a word of its own (an answer, not a
restatement). Otherwise
this provider gives nothing and a chain asks the next provider (the LLM with the passages)."""
from __future__ import annotations

import re
from typing import Any, AsyncIterator

from ..record import timeline as tl
from ..knowledge.base import Retriever
from ..knowledge.query import content_words
from ..speak.numbers import spoken_number
from .base import Note, OracleRequest, note_nothing

MIN_MATCH = 0.7  # share of the question's content words the sentence (and heading) must hold
MIN_QUESTION_WORDS = 2
MIN_NEW_WORDS = 1
MAX_WORDS = 40  # longer sentences are not read out whole


def stem(word: str) -> str:
    """A crude stem, enough to match "charges" with "charge" and "charging"."""
    for suf in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    return word.rstrip("e")[:6] or word[:6]  # "takes" and "take" both "tak"


def _terms(text: str) -> set[str]:
    """Stems of the content words, numbers as words ("10" and "ten" are one term; "45" is "forty five")."""
    out: set[str] = set()
    for w in content_words(text):
        spoken = spoken_number(int(w)) if w.isdigit() and len(w) < 4 else None
        out.update(spoken.split() if spoken else [stem(w)])
    return out


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def best_sentence(question: str, passages: list[tuple[str, str]]) -> tuple[str, float] | None:
    """(sentence, match) of the best matching sentence among (heading, body) passages, or None."""
    # "how long", "how often", "how far": the word after "how" asks, the others name the thing
    q = _terms(re.sub(r"\bhow\s+\w+", "how", question, flags=re.IGNORECASE))
    if len(q) < MIN_QUESTION_WORDS:
        return None
    best: tuple[str, float] | None = None
    for rank, (heading, body) in enumerate(passages):
        h = _terms(heading)
        for sent in _sentences(body):
            s_words = content_words(sent)
            s = _terms(sent)
            if len(s_words) > MAX_WORDS or len(s - q) < MIN_NEW_WORDS or len(q & s) < MIN_QUESTION_WORDS:
                continue  # too long to read out, nothing new, or matched by its heading more than itself
            match = (len(q & s) + 0.5 * len((q & h) - s)) / len(q) - 0.01 * rank
            if match >= MIN_MATCH and (best is None or match > best[1]):
                best = (sent, match)
    return best


class ExtractiveProvider:
    name = "extractive"

    def __init__(self, retriever: Retriever) -> None:
        self.retriever = retriever

    def observe(self, text: str, final: bool, note: Note = note_nothing) -> None:
        self.retriever.observe(text, final, note)

    def describe(self, request: OracleRequest) -> dict[str, Any]:
        return {}

    async def answer(self, request: OracleRequest, note: Note = note_nothing) -> AsyncIterator[str]:
        hits = await self.retriever.hits(request.standalone, note)
        found = best_sentence(request.standalone, [(h.passage.title, h.passage.body) for h in hits])
        if found is None:
            return
        sentence, match = found
        note(tl.EXTRACTIVE, stream=request.stream, text=sentence, match=round(match, 3))
        yield sentence
