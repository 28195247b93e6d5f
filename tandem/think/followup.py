"""A follow-up as a question that stands on its own: "And in Mexico?" after "What language do people
speak in Brazil?" is "What language do people speak in Mexico?".

People ask follow-ups in fragments, leaving out what the last question already said. A large LLM
resolves them from the dialogue history; a small one often does not (SmolLM2, shown "And how many in
a leap year?" after a question about the days in a year, answered "12 months"). Rewriting the
fragment into the question it stands for is what conversational search systems do before they
retrieve (query reformulation), and here it serves three readers at once: the LLM is asked the
whole question (the history stays in the prompt, so a larger LLM loses nothing), the document
search gets its words, and the restated opening ("The capital of Australia is") has a question to
restate, so the tandem starts a follow-up's answer as promptly as a first question's.

Only fragments are rewritten: an utterance with a verb of its own ("And who painted Starry Night?")
is left as it is, and so is anything the rules below cannot place. The rules, over the last question
the user asked (itself resolved, so follow-ups can chain):
- a wh-phrase both share is dropped from the fragment ("how many in a leap year" -> "in a leap year");
- a prepositional phrase replaces the last one with the same preposition ("in Brazil" -> "in Mexico"),
  or is added at the end when there is none;
- a noun phrase replaces the span it aligns with: between words it shares at both ends ("the second
  largest" over "the largest"), after words it shares at the start ("the capital of Australia" over
  "the capital of Canada"), around its head noun ("its freezing point" over "the boiling point"), or
  else the noun phrase of the same kind ("an ant" over "a spider", "Australia" over "Canada").
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

from ..turn.backchannel import is_backchannel

# What people say before a question without it being part of the question. Matched repeatedly, each
# followed by a comma, a full stop or a space.
_LEAD_IN_WORDS = (
    r"um+|uh+|er+|erm|hmm+|so|okay|ok|well|hey|hi|hello|alright|all right|right|oh|ah|and|also|but|now|then|"
    r"yeah|yes|great|cool|nice|thanks|thank you|excuse me|pardon me|sorry to (?:cut in|interrupt)|sorry|"
    r"actually|wait|hang on|hold on|never ?mind|stop(?: please)?|please|one more (?:thing|question)|"
    r"(?:another|quick|next) question|i was wondering|i wonder|let me ask(?: you)?|i have a question"
)
_LEAD_IN = re.compile(rf"^(?:(?:{_LEAD_IN_WORDS})(?:[\s,.!;:]+|$))+", re.IGNORECASE)
# what is left of a sentence that only announces the next one ("Never mind that.", "Wait, a different
# question.") once its lead-in words are gone
_ANNOUNCING = {"that", "it", "this", "a", "different", "question", "one", "more", "another", "thing", "second",
               "moment", "minute", "quick", "me", "ask", "you", "something", "sec"}
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_UNFINISHED = re.compile(r"(?:\.\.\.|…|-)$")  # how Whisper ends a partial cut off mid-word or mid-sentence
_ABOUT = re.compile(r"^(?:what|how) about\s+", re.IGNORECASE)

_WH = {"what", "which", "who", "whom", "whose", "where", "when", "why", "how"}
_AUX = {"is", "are", "was", "were", "am", "be", "been", "do", "does", "did", "can", "could", "will", "would",
        "should", "shall", "may", "might", "must", "has", "have", "had"}
# verbs that questions ask with, in the forms they come in (a word ending in -ed counts as a verb too)
_VERBS = set("""
wrote write writes written paint paints painted sang sing sings sung won win wins make makes made build builds
built invent invents discover discovers find finds found live lives eat eats ate mean means run runs ran flow
flows orbit orbits speak speaks spoke spoken say says said take takes took taken get gets got give gives gave
come comes came go goes went know knows knew known call calls become becomes became begin begins began lead
leads led hold holds held grow grows grew keep keeps kept sell sells sold think thinks thought cost costs fly
flies flew happen happens weigh weighs contain contains use uses belong belongs start starts end ends stand
stands mean means need needs play plays rule rules own owns produce produces
""".split())
_PREPOSITIONS = {"in", "on", "at", "for", "of", "during", "from", "to", "with", "by", "under", "near", "inside",
                 "after", "before", "since", "between", "among", "across", "around", "within", "without", "into",
                 "over", "per"}
_PLACE_PREPOSITIONS = {"in", "on", "at"}
_DETERMINERS = {"the", "a", "an", "this", "that", "these", "those", "some", "any", "each", "every"}
_POSSESSIVES = {"its", "their", "his", "her"}
_PRONOUNS = {"it", "they", "them", "he", "she", "him", "you", "me", "us", "we", "i", "that", "this", "those",
             "these", "one", "ones", "there", "here", "else", "mine", "yours"}
_ORDINALS = {"first", "last", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "next"}
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")


def without_lead_in(text: str) -> str:
    """`text` without the words people open an utterance with ("Okay, and", "Excuse me,", "Sorry to cut
    in."), and without sentences that only announce the next one ("Never mind that. How many...")."""
    text = _LEAD_IN.sub("", text.strip()).strip()
    while True:
        parts = _SENTENCE_END.split(text, maxsplit=1)
        if len(parts) < 2 or not all(w.lower() in _ANNOUNCING for w in _words(parts[0])):
            return text
        text = _LEAD_IN.sub("", parts[1]).strip()


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _is_verb(word: str, first: bool) -> bool:
    w = word.lower()
    if w in _AUX or w in _VERBS or w.endswith("n't") or re.fullmatch(r"\w+'(s|re|ve|ll|d)", w):
        return True
    return len(w) > 4 and w.endswith("ed") and (first or not word[0].isupper())  # not "the United States"


def is_fragment(text: str) -> bool:
    """An utterance with words and no verb: "And in Mexico?", "the second largest", "how many in a leap year"."""
    words = _words(without_lead_in(text))
    return bool(words) and not any(_is_verb(w, i == 0) for i, w in enumerate(words))


def _wh_phrase(words: Sequence[str]) -> int:
    """How many words the question's opening wh-phrase takes ("how many" 2, "what color" 2, "who" 1), or 0."""
    if not words or words[0].lower() not in _WH:
        return 0
    if len(words) > 1 and words[0].lower() == "how" and words[1].lower() in ("many", "much", "long", "far", "old",
                                                                               "tall", "big", "deep", "high"):
        return 2
    if len(words) > 1 and words[0].lower() in ("what", "which", "whose") and not _is_verb(words[1], False) \
            and words[1].lower() not in _PREPOSITIONS:
        return 2  # "what color", "which animal"
    return 1


def _chunk_end(q: Sequence[str], i: int) -> int:
    """Where the phrase that starts at q[i] ends: at the next preposition, verb or wh-word."""
    j = i + 1
    while j < len(q) and q[j].lower() not in _PREPOSITIONS and not _is_verb(q[j], False) \
            and q[j].lower() not in _WH:
        j += 1
    return j


def _noun_phrases(q: Sequence[str], skip: int) -> list[tuple[int, int]]:
    """(start, end) of the noun phrases of question `q`, past its first `skip` words (its wh-phrase)."""
    out, i = [], skip
    while i < len(q):
        w = q[i].lower()
        if w in _PREPOSITIONS or _is_verb(q[i], False) or w in _WH or w in _PRONOUNS:
            i += 1
            continue
        j = _chunk_end(q, i)
        out.append((i, j))
        i = j
    return out


def _kind(words: Sequence[str]) -> str:
    """What kind of noun phrase: a name ("the United States", "Canada"), "a ...", "the ..." or bare."""
    first = words[0].lower()
    if any(w[0].isupper() for w in words if w.lower() not in _DETERMINERS):
        return "name"
    if first in ("a", "an"):
        return "a"
    return "the" if first in _DETERMINERS else "bare"


def _superlative(words: Sequence[str], i: int) -> tuple[int, int] | None:
    """(start, end) of the superlative around words[i] ("largest", "second largest", "most famous"), or None."""
    w = words[i].lower()
    if w in ("most", "least") and i + 1 < len(words):
        end = i + 2
    elif len(w) > 4 and w.endswith("est") and w not in ("forest", "interest", "request", "west", "guest", "test",
                                                         "chest", "nest", "rest", "best", "contest", "harvest"):
        end = i + 1
    elif w in ("best", "worst"):
        end = i + 1
    else:
        return None
    start = i
    if start > 0 and words[start - 1].lower() in _ORDINALS:
        start -= 1
    return start, end


def _replace(q: list[str], i: int, j: int, with_words: Sequence[str]) -> list[str]:
    return q[:i] + list(with_words) + q[j:]


def _resolve(frag: list[str], q: list[str]) -> list[str] | None:
    low_q = [w.lower() for w in q]
    low_f = [w.lower() for w in frag]
    head = _wh_phrase(q)
    frag_was_wh = False
    if frag and low_f[0] in _WH:  # a wh-phrase the two share is the last question's: "how many in a leap year"
        n = _wh_phrase(frag)
        if low_f[:n] != low_q[:n]:
            return None
        frag, low_f = frag[n:], low_f[n:]
        frag_was_wh = True
    if not frag or all(w in _PRONOUNS or w in _DETERMINERS for w in low_f) \
            or low_f[-1] in _PREPOSITIONS | _DETERMINERS | _POSSESSIVES | {"and", "or"}:
        return None  # nothing to place, or a fragment still being said ("and the capital of")
    if low_f[0] in _PREPOSITIONS:
        if len(frag) < 2:
            return None
        same = [i for i in range(head, len(q)) if low_q[i] == low_f[0]]
        if not same and low_f[0] in _PLACE_PREPOSITIONS:
            same = [i for i in range(head, len(q)) if low_q[i] in _PLACE_PREPOSITIONS]
        if not same:
            return q + frag
        i = same[-1]
        return _replace(q, i, _chunk_end(q, i + 1) if i + 1 < len(q) else len(q), frag)
    if low_f[0] in _POSSESSIVES:  # "its freezing point": the thing the last question asked about
        frag, low_f = ["the"] + frag[1:], ["the"] + low_f[1:]
        if len(frag) < 2:
            return None
        hits = [j for j in range(head, len(q)) if low_q[j] == low_f[-1]]
        if hits:  # around the head noun: "the freezing point" over "the boiling point of water"
            j = i = hits[-1]
            while i > head and low_q[i - 1] not in _PREPOSITIONS and not _is_verb(q[i - 1], False) \
                    and low_q[i - 1] not in _WH:
                i -= 1
            return _replace(q, i, j + 1, frag)
    if head == 2 and low_f[:1] != low_q[:1] and low_q[0] == "how" and low_f[0] not in _DETERMINERS \
            and frag_was_wh:  # "how many oceans" over "how many continents are there"
        return _replace(q, head, _chunk_end(q, head), frag)
    # a superlative for a superlative: "the smallest (one)" over "the largest planet in the solar system";
    # an ordinal alone ranks the last question's superlative: "and the second?"
    if len(frag) > 1 and low_f[-1] in ("one", "ones"):
        frag, low_f = frag[:-1], low_f[:-1]
    bare = [w for w in low_f if w not in _DETERMINERS]
    if len(bare) == 1 and bare[0] in _ORDINALS:
        q_ord = [i for i in range(head, len(q)) if low_q[i] in _ORDINALS]
        if q_ord:  # "and the second?" after "who was the first president"
            return _replace(q, q_ord[-1], q_ord[-1] + 1, [bare[0]])
        q_sup = [s for s in (_superlative(low_q, i) for i in range(head, len(q))) if s]
        if q_sup:
            i, j = q_sup[-1]
            return _replace(q, i, j, [bare[0]] + q[i + 1 if low_q[i] in _ORDINALS else i:j])
    frag_sup = next((s for s in (_superlative(low_f, i) for i in range(len(frag))) if s), None)
    if frag_sup is not None and frag_sup[1] == len(frag) and all(w in _DETERMINERS for w in low_f[:frag_sup[0]]):
        q_sup = [s for s in (_superlative(low_q, i) for i in range(head, len(q))) if s]
        if q_sup:
            i, j = q_sup[-1]
            return _replace(q, i, j, frag[frag_sup[0]:])
    # shared words at both ends: "the second largest" over "the largest"
    for j in range(len(q) - 1, head - 1, -1):
        if low_q[j] == low_f[-1] and len(frag) > 1:
            starts = [i for i in range(max(head, j - 6), j) if low_q[i] == low_f[0]]
            if starts:
                return _replace(q, starts[-1], j + 1, frag)
    # shared words at the start: "the capital of Australia" over "the capital of Canada"
    best = (0, -1)
    for i in range(head, len(q)):
        k = 0
        while k < len(frag) and i + k < len(q) and low_q[i + k] == low_f[k]:
            k += 1
        if k > best[0] and any(w not in _DETERMINERS for w in low_f[:k]):
            best = (k, i)
    k, i = best
    if k >= 1 and k < len(frag):
        rest = i + k
        return _replace(q, i, _chunk_end(q, rest) if rest < len(q) else len(q), frag)
    # the noun phrase of the same kind: "an ant" over "a spider", "Australia" over "Canada"
    phrases = _noun_phrases(q, head)
    if not phrases:
        return None
    kind = _kind(frag)
    same_kind = [p for p in phrases if _kind(q[p[0]:p[1]]) == kind]
    i, j = (same_kind or phrases)[-1]
    return _replace(q, i, j, frag)


def cut_off(text: str) -> bool:
    """Whisper marked the end of `text` as cut off ("...of Aust...", "the capital of each..."): its last
    word may be a piece of another."""
    return bool(_UNFINISHED.search(text.strip()))


def standalone(utterance: str, previous: str | None) -> str | None:
    """`utterance` rewritten as a question that stands alone, given the `previous` question the user
    asked (already standing alone); None when it stands alone already, is no follow-up, or cannot be
    placed in the previous question. A partial transcript that Whisper marks as cut off ("Never...",
    "and the cap-") is no fragment yet: its last words are still to come."""
    if not previous or cut_off(utterance) or not is_fragment(utterance) \
            or is_backchannel(utterance):
        return None
    text = _ABOUT.sub("", without_lead_in(utterance))
    frag = _words(text)
    q = _words(without_lead_in(previous))
    if not frag or len(q) < 2 or q[0].lower() not in _WH | _AUX:
        return None
    out = _resolve(frag, q)
    if out is None or [w.lower() for w in out] == [w.lower() for w in q]:
        return None
    return " ".join(out) + "?"


def resolved_questions(user_turns: Iterable[str]) -> list[str]:
    """Each user turn as it stands alone, in order: a follow-up resolved against the last question
    before it (resolved in turn, so "And in Mexico?" ... "And in Peru?" chain). Turns that are no
    question (a backchannel, a statement) leave the last question as it was."""
    out: list[str] = []
    last: str | None = None
    for turn in user_turns:
        asked = standalone(turn, last) or turn
        out.append(asked)
        words = _words(without_lead_in(asked))
        if words and words[0].lower() in _WH | _AUX and not is_fragment(asked):
            last = asked
    return out


def current_question(earlier_user_turns: Sequence[str], current: str, heard_whole: bool = True) -> str | None:
    """The user's current turn as the LLM is to be asked it, given the turns before it: a follow-up
    fragment resolved (`standalone`), or else the turn without its lead-in ("Sorry to cut in. How
    many hours are in a day?" -> "How many hours are in a day?"), but for an "and" that ties it to
    the last exchange ("Right. And the second largest?" -> "And what is the second largest ocean on
    Earth?"); None when it needs no rewriting.

    Why the lead-in goes: with the dialogue before it, a small LLM reads "Sorry to cut in" or "Okay,
    and" as a cue to go on with the last reply (SmolLM2, after a reply cut at "The ocean is a vast":
    "The ocean is a vast, mysterious place that can be explored in hours."). Text only, on 18
    interruptions with the first reply cut after 3, 5 or 9 words, the question without its lead-in
    was answered 15, 16 and 14 times, with it 12, 14 and 14 (scripts/followup_prompt_probe.py).

    `heard_whole`: the turn is final. A partial is resolved as a fragment only once it ends a sentence
    ("And in Mexico?"): "Never" is how "Never mind that. How many legs does a dog have?" begins."""
    earlier = resolved_questions(earlier_user_turns)
    previous = next((q for q in reversed(earlier)
                     if _words(without_lead_in(q))[:1] and not is_fragment(q)
                     and _words(without_lead_in(q))[0].lower() in _WH | _AUX), None)
    clean = without_lead_in(current)
    if not _words(clean) or is_backchannel(current):
        return None
    resolved = standalone(current, previous) if heard_whole or re.search(r"[?!.]$", current.strip()) else None
    asked = resolved or clean
    lead_in = current.strip()[: len(current.strip()) - len(clean)]
    if re.search(r"\b(?:and|also)\b", lead_in, re.IGNORECASE):
        # the cue that it goes on from the last exchange stays: SmolLM2, asked "What color is grass?"
        # after a question about the sky, said "a shade of blue"; asked "And what color is grass?", "green"
        asked = "And " + asked[0].lower() + asked[1:]
    else:
        asked = asked[0].upper() + asked[1:]
    return None if [w.lower() for w in _words(asked)] == [w.lower() for w in _words(current)] else asked
