"""From what the user said to a full-text query: the content words of a (possibly partial)
transcript, with the variants speech-to-text makes of them ("Bluefin" heard as "blue fin", "45" for
"forty five"), joined with OR so that BM25 ranks passages by how many of them they hold."""
from __future__ import annotations

import re

from ..speak.numbers import ONES, TENS, spoken_number

# function words and the words every spoken question has ("tell me", "how many"): they match
# everywhere and rank nothing
STOPWORDS = frozenset("""
a an the and or but if then so of in on at to for from by with about into over under as is are was
were be been being am do does did done doing have has had having i me my mine you your yours we us our
he him his she her it its they them their this that these those there here what which who whom whose
when where why how can could would should will shall may might must not no yes please tell know
okay ok well um uh er hmm oh hey hi so just also any some much many more most very really get got
thing things like want wonder wondering question quick say said let lets actually again
""".split())


def content_words(text: str) -> list[str]:
    """Lower-case content words of `text`, in order, each once."""
    seen: dict[str, None] = {}
    for w in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower()):
        w = w.split("'")[0]
        if w and w not in STOPWORDS and (len(w) > 1 or w.isdigit()):
            seen.setdefault(w, None)
    return list(seen)


def query_terms(text: str) -> list[str]:
    """The terms to search for `text`: its content words, and the variants speech-to-text makes of
    them (a term of two words is a phrase)."""
    terms: dict[str, None] = {}
    for w in content_words(text):
        terms.setdefault(w, None)
        if w.isdigit():
            spoken = spoken_number(int(w))
            if spoken:
                terms.setdefault(spoken, None)  # a phrase: "forty five"
    raw = re.findall(r"[a-z0-9]+", text.lower())
    for a, b in zip(raw, raw[1:]):  # a name the recogniser split in two: "blue fin" for "Bluefin"
        if a not in STOPWORDS and b not in STOPWORDS and not (a.isdigit() or b.isdigit()):
            terms.setdefault(a + b, None)
    for i in range(len(raw) - 1):  # "forty five" heard in words, "45" in the document
        if raw[i] in TENS and raw[i + 1] in ONES[1:10]:
            terms.setdefault(str((TENS.index(raw[i]) + 2) * 10 + ONES.index(raw[i + 1])), None)
    return list(terms)


def fts_match(terms: list[str]) -> str:
    return " OR ".join(f'"{t}"' for t in terms)


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for `text` (empty when it has no content words)."""
    return fts_match(query_terms(text))
