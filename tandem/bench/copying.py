"""Did the front-end say the oracle's facts exactly? The copy-exactness measure, one definition for
held-out synthetic dialogues (`tandem evaluate`), replayed real timelines (`tandem replay`) and live
benchmark runs.

An oracle's key words are what a garbled copy gets wrong and a listener needs: names (capitalised
words that do not merely open a sentence) and numbers (digits or number words), in its first
sentence, which holds the answer. A copy is exact when every key word was said as a whole word, in
the oracle's order: "in Mexico, the
langua age spoken" or "Tushteer tcresh" fail, a repair followed by the right words passes.
"""
from __future__ import annotations

import re
from typing import Any

NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand "
    "million billion".split())
# capitalised only because they open a sentence
SENTENCE_OPENERS = frozenset(
    "the a an it its this that these those there they he she we i you yes no in on at of to for from by with "
    "about around mostly well so and but or people his her their our my your what which who where when how "
    "sorry okay right let hello hi thanks thank happy pretty oh nice".split())

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9']*")


def words(text: str) -> list[str]:
    """Lower-case words, apostrophes kept inside ("don't"), everything else a separator."""
    return [w.lower().strip("'") for w in _WORD.findall(text)]


def key_words(oracle: str) -> list[str]:
    """The names and numbers of an oracle text, lower-cased, in order."""
    out = []
    sentence_start = True
    for m in re.finditer(r"[A-Za-z0-9][A-Za-z0-9']*|[.!?]", oracle):
        tok = m.group(0)
        if tok in ".!?":
            sentence_start = True
            continue
        low = tok.lower().strip("'")
        is_name = tok[0].isupper() and not (sentence_start and low in SENTENCE_OPENERS) and low != "i"
        if any(c.isdigit() for c in tok) or low in NUMBER_WORDS or is_name:
            out.append(low)
        sentence_start = False
    return out


def said_in_order(said: list[str], wanted: list[str]) -> bool:
    it = iter(said)
    return all(any(w == s for s in it) for w in wanted)


def answer_sentence(oracle: str) -> str:
    """The oracle's first sentence: where its answer is ("Bees make honey, but ..."); an LLM often
    goes on for sentences that the front-end rightly does not finish before the user speaks again or
    the recording ends."""
    m = re.match(r"\s*(.+?[.!?])(\s|$)", oracle, re.DOTALL)
    return m.group(1) if m else oracle


def copied_exactly(said: str, oracle: str) -> bool | None:
    """True when every key word of the oracle's answer sentence is in `said` as a whole word, in
    order; None when it has no key words (nothing to garble that this measure can see)."""
    keys = key_words(answer_sentence(oracle))
    if not keys:
        return None
    return said_in_order(words(said), keys)


def cut_short(said: str, oracle: str, tail_words: int = 3) -> bool:
    """`said` is a right beginning of the oracle's answer sentence that stops before its last key
    words: the key words it has are the first ones, in order, and what follows the last of them is
    the sentence's own next words, or fewer than `tail_words` words (a recording that ends mid-reply
    cuts it there; a garbled copy goes on past the word it got wrong)."""
    sentence = answer_sentence(oracle)
    keys, want, got = key_words(sentence), words(sentence), words(said)
    pos = opos = -1
    matched = 0
    for k in keys:
        nxt = next((i for i in range(pos + 1, len(got)) if got[i] == k), None)
        if nxt is None:
            break
        pos, matched = nxt, matched + 1
        opos = next((i for i in range(opos + 1, len(want)) if want[i] == k), opos)
    if matched == len(keys):
        return False
    tail, rest = got[pos + 1:], want[opos + 1:]
    return len(tail) < tail_words or tail == rest[: len(tail)]


def exact_pct(pairs: list[tuple[str, str]]) -> tuple[float | None, int]:
    """(percentage of (said, oracle) pairs copied exactly over those with key words, that count)."""
    judged = [v for v in (copied_exactly(s, o) for s, o in pairs) if v is not None]
    return (round(100 * sum(judged) / len(judged), 1) if judged else None), len(judged)


def last_oracle_text(timeline: dict[str, Any]) -> str:
    """The text handed to the front-end since the last oracle reset: the oracle it was left with.
    A session hands the oracle over in whole words (`oracle_append` text without the spaces between)."""
    parts: list[str] = []
    events = sorted((e for e in timeline["events"] if e["kind"] in ("oracle_reset", "oracle_append")),
                    key=lambda e: e["t"])
    for e in events:
        parts = [] if e["kind"] == "oracle_reset" else parts + [e.get("text", "")]
    return " ".join(" ".join(parts).split())
