"""Respellings for words the assistant's voice (hibari) says wrong, applied just before synthesis.

hibari reads an interjection through its spelling rules: "Hmm" becomes /hmm/, which is heard as a
word ("Home, let me think.", "him", "I'm a good question." from Whisper tiny.en); a longer "Hmmmm"
still turns into "home" or "whom" in some sentences, and "Mmm" loses its hum altogether. The
shipped compact front-end says "Hmm, ..." in every answer it gives without an oracle, so its hum
must be a hum. hibari's G2P takes a word's phonemes directly as `[word](/phonemes/)` (misaki's
link syntax); a bare five-m hum /mmmmm/ was heard as "Mm"/"Mmm" in all nine sentence contexts
tried, where /mmm/ vanished and an h or a stress mark brought words back ("Hemm", "I'm").

A chemical symbol is read as a word too: "Au" becomes /O/ ("The chemical symbol for gold is o", as
Whisper heard it), "Ag" /æɡ/, "Fe" /fi/. Symbols of two letters with a vowel, written as symbols are
(capital, small), are spelled out letter by letter, as a chemist says them; those that are also
words or names a reply may hold ("He", "In", "As", "No", "La", "Po"...) are left alone. Symbols with
no vowel ("Hg", "Pb") hibari already spells.

The link syntax is hibari's own: other engines would read it aloud, so only hibari's `synthesize`
applies this (tests/test_pronounce.py listens to the result).
"""
from __future__ import annotations

import re

HUM = "mmmmm"
# word (lower case) -> phonemes in hibari's (misaki's) alphabet
PHONEMES: dict[str, str] = {w: HUM for w in ("hm", "hmm", "hmmm", "hmmmm", "mm", "mmm", "mmmm")}

_LINK = re.compile(r"\[[^\]]+\]\([^)]*\)")  # hibari's G2P pattern: a link already there is left as it is


# letter names in hibari's alphabet, "{s}" where the letter's stress mark goes (before its vowel)
LETTERS: dict[str, str] = {
    "A": "{s}A", "B": "b{s}i", "C": "s{s}i", "D": "d{s}i", "E": "{s}i", "F": "{s}ɛf", "G": "ʤ{s}i",
    "H": "{s}Aʧ", "I": "{s}I", "J": "ʤ{s}A", "K": "k{s}A", "L": "{s}ɛl", "M": "{s}ɛm", "N": "{s}ɛn",
    "O": "{s}O", "P": "p{s}i", "Q": "kj{s}u", "R": "{s}ɑɹ", "S": "{s}ɛs", "T": "t{s}i", "U": "j{s}u",
    "V": "v{s}i", "W": "d{s}ʌbᵊlju", "X": "{s}ɛks", "Y": "w{s}I", "Z": "z{s}i",
}
# two-letter element symbols with a vowel that are not also common words, names or abbreviations
SPELLED_SYMBOLS = frozenset("Li Ne Na Si Ar Ca Sc Ti Fe Ni Cu Ga Ge Se Ru Ag Te Xe Ba Ce Eu Lu Os Ir "
                            "Au Bi Ac Pu Og".split())


def spelled(letters: str) -> str:
    """Letter names as hibari's phonemes, stressed as an initialism: "Au" -> "ˌAjˈu"."""
    up = letters.upper()
    return "".join(LETTERS[c].format(s="ˈ" if i == len(up) - 1 else "ˌ") for i, c in enumerate(up))


def _respell(m: re.Match) -> str:
    if m.group("hum"):
        return f"[{m.group('hum')}](/{PHONEMES[m.group('hum').lower()]}/)"
    if m.group("symbol"):
        return f"[{m.group('symbol')}](/{spelled(m.group('symbol'))}/)"
    return m.group(0)  # a link already there is left as it is


# one pass, left to right: a link (kept as it is), else a hum (any case) or a symbol (as written), each a
# whole word only (not part of a longer or hyphenated one: "mm-hmm")
_WHOLE = r"(?<![\w'-]){}(?![\w'-])"
_RESPELL = re.compile("|".join((
    _LINK.pattern,
    _WHOLE.format("(?P<hum>(?i:" + "|".join(sorted(PHONEMES, key=len, reverse=True)) + "))"),
    _WHOLE.format("(?P<symbol>" + "|".join(sorted(SPELLED_SYMBOLS)) + ")"),
)))


# a number longer than this is read group by group: hibari's scale words end at "decillion" (36 digits), and a
# longer one (a small LLM's "7,987,987,987,..." looping) raised inside it and left the segment silent
MAX_SCALED_DIGITS = 15  # up to the trillions; a listener follows no longer number by its scale words
_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+|\d+")


def _grouped(m: re.Match) -> str:
    digits = m.group(0).replace(",", "")
    if len(digits) <= MAX_SCALED_DIGITS:
        return m.group(0)
    head = len(digits) % 3 or 3
    return " ".join([digits[:head]] + [digits[i: i + 3] for i in range(head, len(digits), 3)])


def respell(text: str) -> str:
    """`text` with each word hibari mispronounces given its phonemes, e.g. "Hmm, so." ->
    "[Hmm](/mmmmm/), so.", "It is Au." -> "It is [Au](/ˌAjˈu/)."; a number too long for scale words read
    group by group; everything else unchanged."""
    return _RESPELL.sub(_respell, _NUMBER.sub(_grouped, text))
