"""The part of an answer that the question already holds, and the LLM's answer spliced onto it.

"What is the capital of Thailand?" is answered "The capital of Thailand is ...": those words can be
said before any LLM has replied, so the front-end starts the answer itself instead of a filler that
must end before the answer can begin. `restate` turns a transcribed question into that opening
(or None when it is not one of the common shapes it knows: then nothing changes); `Splicer` takes
the LLM's streamed reply and passes it on as the continuation of the opening: unchanged when the
reply begins with the same words (small LLMs mostly restate the question), otherwise the opening
followed by the reply's first sentence's new words ("Bangkok is the capital of Thailand." ->
"The capital of Thailand is Bangkok."), or, when no clean splice exists, the reply as it came (the
front-end then repairs, as for any newer oracle that disagrees).
"""
from __future__ import annotations

import re
from typing import Callable

from ..bench.copying import NUMBER_WORDS
from .followup import cut_off, without_lead_in

_POLITE = re.compile(r"^(?:(?:can|could) you tell me|do you know|(?:please )?tell me|any idea)[\s,]+", re.IGNORECASE)
_PAST = {"wrote": "written", "painted": "painted", "invented": "invented", "discovered": "discovered",
         "composed": "composed", "directed": "directed", "founded": "founded", "designed": "designed",
         "built": "built", "created": "created", "sculpted": "sculpted", "developed": "developed",
         "sang": "sung"}
_HOW = "tall|old|long|far|big|deep|high|large|heavy|fast|hot|cold|wide"

_HAVE = {"does": "has", "do": "have", "did": "had"}


_FUNCTION_WORDS = {"of", "in", "the", "a", "an", "for", "on", "by", "to", "and"}


def _cut_off(text: str) -> bool:
    """A phrase that stops where it cannot end ("the", "the capital of"): a partial still being said."""
    words = text.split()
    return not words or words[-1].lower() in _FUNCTION_WORDS


def stops_unfinished(text: str) -> bool:
    """`text` stops where a sentence cannot end: on a word Whisper marked as cut off, or a function word."""
    return cut_off(text) or _cut_off(re.sub(r"[^\w\s']", " ", text))


def _np(text: str) -> str | None:
    """A noun phrase worth saying: two words at least, not cut off after a preposition."""
    return None if len(text.split()) < 2 or _cut_off(text) else text


# (pattern over the cleaned question, m -> opening or None); groups keep the question's own casing
_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str | None]]] = [
    (re.compile(r"^what (is|was) (the \w+(?: \w+)+)$", re.I), lambda m: _join(_np(m[2]), m[1].lower())),
    (re.compile(r"^who (is|was) (the \w+(?: \w+)+)$", re.I), lambda m: _join(_np(m[2]), m[1].lower())),
    (re.compile(rf"^who ({'|'.join(_PAST)}) (?!(?:it|that|this|them|these|those)$)(.+)$", re.I),
     lambda m: None if _cut_off(m[2]) else f"{m[2]} was {_PAST[m[1].lower()]} by"),
    (re.compile(r"^how many \w+(?: \w+)? (?:are there|were there|are|were)(?: (?:in|on) .+)?$", re.I),
     lambda m: "There are"),
    (re.compile(r"^how many \w+(?: \w+)? (does|do|did) (.+?) have$", re.I), lambda m: f"{m[2]} {_HAVE[m[1].lower()]}"),
    (re.compile(rf"^how (?:{_HOW}) (is|are|was) (.+)$", re.I), lambda m: f"{m[2]} {m[1].lower()}"),
    (re.compile(r"^where (is|are) (.+)$", re.I), lambda m: f"{m[2]} {m[1].lower()}"),
]


def _join(np_text: str | None, verb: str) -> str | None:
    return f"{np_text} {verb}" if np_text else None


def _clean(question: str) -> str:
    q = question.strip().rstrip("?.! ").strip()
    q = without_lead_in(q)
    q = without_lead_in(_POLITE.sub("", q))
    q = re.sub(r"\b(what|who|where|how)(?:'s)\b", r"\1 is", q, flags=re.IGNORECASE)
    q = re.sub(r"[,;]", " ", q)
    return " ".join(q.split())


# the user's words about themselves, as the assistant says them back ("do I have" -> "you have")
_PERSON = {"i": "you", "me": "you", "my": "your", "mine": "yours", "we": "you", "us": "you", "our": "your",
           "am": "are", "myself": "yourself", "ourselves": "yourselves"}


def _second_person(text: str) -> str:
    return re.sub(r"\b[A-Za-z]+\b", lambda m: _PERSON.get(m.group(0).lower(), m.group(0)), text)


# longer, the subject is said as "It" when the LLM answers soon enough ("It is Canberra."): every word
# before the answer is heard, and a quick LLM's answer is there before the subject would be said again
SHORT_OPENING_WORDS = 2


def restate(question: str, short: bool = False, short_words: int | None = None) -> str | None:
    """The opening of the answer to `question`, or None. Only complete shapes are restated: a
    partial transcript that stops after "of" gives None, not "The capital of is". `short`: an
    opening of more than `short_words` (SHORT_OPENING_WORDS) words names its subject "It" ("The play Romeo and
    Juliet was written by" -> "It was written by"): at the front-end's pace each word delays the
    answer by about a third of a second, worth it only while the LLM's reply is still to come."""
    if cut_off(question):
        return None  # "What is the capital of each..." is not a whole question: its last word may be "Egypt"
    q = _clean(question)
    for pattern, build in _RULES:
        m = pattern.match(q)
        if m:
            out = build(m)
            if not out:
                return None
            out = _second_person(out)
            if short:
                out = _with_pronoun(out, SHORT_OPENING_WORDS if short_words is None else short_words)
            return out[0].upper() + out[1:]
    return None


def _with_pronoun(opening: str, max_words: int) -> str:
    words = opening.split()
    if len(words) <= max_words:
        return opening
    if len(words) > 3 and words[-1] == "by" and words[-3] in ("was", "were"):
        return "it was " + " ".join(words[-2:])  # "... was written by": a work is "it"
    if words[-1] in ("is", "was", "has"):  # a singular subject; a plural one ("are", "have") stays as said
        return "it " + words[-1]
    return opening


def still_fits(opening: str, question: str) -> bool:
    """`opening` is still about `question`: each of its own words (not its fillers, nor the words the
    rules put in: "written", "you", "has") is in the question. A revised transcript ("the capital of
    Austria" heard again as "...of Australia") or a new question ("And Germany?") no longer fits."""
    asked = set(_norm_words(question))
    return all(w in asked for w in _norm_words(opening) if w not in _RULE_WORDS)


def goes_on_from(opening: str, said: str) -> bool:
    """`opening` begins with the words `said` (its case and punctuation aside): a reply that said them can
    go on with it ("The" of "The tallest animal in the world is")."""
    said_words = _norm_words(said)
    return bool(said_words) and _norm_words(opening)[: len(said_words)] == said_words


def _norm_words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


_FILLER_WORDS = frozenset(
    "the a an is was are were of in on at by for to it it's its that this there these those located known as called "
    "and which who what has have had be been being well so yes actually".split())


# words an opening may hold that its question need not: fillers and what the rules put in
_RULE_WORDS = frozenset(_PAST.values()) | frozenset(_PERSON.values()) | frozenset(_HAVE.values()) | _FILLER_WORDS

BARE_ANSWER_WORDS = 3  # a first sentence this short is the answer alone ("Bangkok.", "It is Bangkok.")


_LIST_MARKER = re.compile(r"^\s*(?:\d{1,2}[.)]|[-*•])(?:\s+|$)")


def splice(opening: str, question: str, reply: str) -> str | None:
    """`reply` rewritten to continue `opening`; None when no clean splice exists: the reply's first
    sentence must be about what the opening says (hold its words: "Bangkok is the capital of
    Thailand.") or be a bare answer."""
    # a list's number is no answer: after a reply that was a list, SmolLM2 answers "1. William Shakespeare"
    reply = _LIST_MARKER.sub("", reply)
    ow, rw = _norm_words(opening), _norm_words(reply)
    if rw[: len(ow)] == ow:
        return reply
    m = re.match(r"\s*(.+?[.!?])(\s+.*)?$", reply, re.DOTALL)
    first, rest = (m.group(1), m.group(2) or "") if m else (reply.strip(), "")
    sentence = _norm_words(first)
    said_after = _after_words(_full_opening_words(opening, question), first)
    if said_after:
        return f"{opening} {said_after}{rest}"
    about = [w for w in ow if w not in _FILLER_WORDS and w not in NUMBER_WORDS]  # "sixty four" may come as "64"
    if len(sentence) > BARE_ANSWER_WORDS and not all(w in sentence for w in about):
        return None  # a sentence about something else ("Portugal is a country in Europe.") answers no opening
    known = set(_norm_words(question)) | set(ow) | _FILLER_WORDS
    found = list(re.finditer(r"[A-Za-z0-9][A-Za-z0-9'.,-]*[A-Za-z0-9]|[A-Za-z0-9]", first))
    tokens = [m.group(0) for m in found]
    spans: list[list[tuple[int, str]]] = []
    for i, tok in enumerate(tokens):
        new = any(w not in known for w in _norm_words(tok))
        # a comma ends a span: "the renowned playwright, William Shakespeare" names the answer apart
        joined = i > 0 and not re.search(r"[,;:]", first[found[i - 1].end(): found[i].start()])
        if new and spans and spans[-1][-1][0] == i - 1 and joined:
            spans[-1].append((i, tok))
        elif new:
            spans.append([(i, tok)])
    if not spans:
        return None

    def names(span: list[tuple[int, str]]) -> int:
        return sum(i > 0 and t[0].isupper() and not re.fullmatch(r"I(?:'\w+)?", t) for i, t in span)

    def rank(span: list[tuple[int, str]]) -> int:
        """0: a number; 1: a name (half its words capitalised at least: "Leonardo da Vinci"); 2: other words
        ("renowned French playwright" describes the answer without naming it)."""
        words = [w for _, t in span for w in _norm_words(t)]
        if any(w[0].isdigit() or w in NUMBER_WORDS for w in words):
            return 0
        return 1 if 2 * names(span) >= len(span) else 2
    # a number, then a name, then other words; of two alike, one after the opening's verb ("The square root
    # of 64 is 8.") before one ahead of it ("Paris is the capital of France."): numbers before the verb may
    # restate the question's. SmolLM2 answered "The play Romeo and Juliet by William Shakespeare was written
    # by the renowned French playwright and poet.": the name, not the words after the verb. Of two names
    # alike, the one of more capitalised words
    verb = ow[-1] if ow else ""
    at = max((i for i, t in enumerate(tokens) if t.lower() == verb), default=-1)
    best = min(spans, key=lambda s: (rank(s), s[0][0] < at, -names(s), s[0][0]))
    if not about and rank(best) > 1:
        return None  # an opening that names nothing ("There are") goes on with a number or a name only
    answer = " ".join(t for _, t in best).rstrip(".,")
    return f"{opening} {answer}.{rest}"


def _words_after(text: str, n: int) -> str:
    """`text` after its first `n` words."""
    words = list(re.finditer(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?", text))
    return text[words[n - 1].end():].lstrip() if n else text


def _full_opening_words(opening: str, question: str) -> list[str]:
    """The words of the opening `question` restates in full, when `opening` is that one made short
    ("It is" for "The largest animal in the ocean is"); [] otherwise. A reply that begins with them goes
    on after them, its answer common nouns included ("the blue whale.")."""
    full = _norm_words(restate(question) or "")
    return full if full != _norm_words(opening) else []


def _after_words(words: list[str], text: str) -> str | None:
    """`text` after its first words, when they are `words` and more follow; None otherwise."""
    said = _norm_words(text)
    if not words or len(said) <= len(words) or said[: len(words)] != words:
        return None
    return _words_after(text, len(words)).strip()


class Splicer:
    """Streams an LLM reply as the continuation of `opening`, which was passed on already (with the
    space after its last word, so what follows comes without one): text is
    held until it is clear whether the reply begins with the opening (then what follows it passes
    through) or not (then its first sentence is awaited and spliced). A reply that cannot be spliced
    replaces the opening: `push`/`flush` then return it whole with `replaces` set, and the caller
    resets the oracle first."""

    def __init__(self, opening: str, question: str) -> None:
        self.opening = opening
        self.question = question
        self._held = ""
        self._decided = False
        self.replaces = False
        self.continued = False  # some reply text was passed on
        self._full = _full_opening_words(opening, question)  # worked out once, not for every chunk

    def push(self, text: str) -> str:
        if self._decided:
            self.continued = self.continued or bool(text.strip())
            return text
        self._held += text
        held = _LIST_MARKER.sub("", self._held)  # "1. William Shakespeare": the list's number is no sentence
        ow, hw = _norm_words(self.opening), _norm_words(held)
        complete = bool(re.search(r"[.!?](\s|$)", held))
        if len(hw) > len(ow) and hw[: len(ow)] == ow:
            return self._release(held)
        after = _after_words(self._full, held)
        if after is not None:
            return self._release(self.opening + " " + after)
        if hw and hw[: len(ow)] != ow[: len(hw)] and complete:
            return self._release(splice(self.opening, self.question, held) or held)
        return ""

    def flush(self) -> str:
        if self._decided or not self._held.strip():
            return ""
        return self._release(splice(self.opening, self.question, self._held) or self._held)

    def _release(self, text: str) -> str:
        self._decided = True
        self._held = ""
        n = len(_norm_words(self.opening))
        words = list(re.finditer(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?", text))
        if len(words) >= n and [w.group(0).lower() for w in words[:n]] == _norm_words(self.opening):
            text = text[words[n - 1].end():].lstrip()  # what follows the opening (passed on with its space)
        else:
            self.replaces = True
        self.continued = bool(text.strip())
        return text
