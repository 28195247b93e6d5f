"""Respellings for words the assistant's voice (hibari) says wrong, applied just before synthesis.

hibari reads an interjection through its spelling rules: "Hmm" becomes /hmm/, which is heard as a
word ("Home, let me think.", "him", "I'm a good question." from Whisper tiny.en); a longer "Hmmmm"
still turns into "home" or "whom" in some sentences, and "Mmm" loses its hum altogether. The
shipped compact front-end says "Hmm, ..." in every answer it gives without an oracle, so its hum
must be a hum. hibari's G2P takes a word's phonemes directly as `[word](/phonemes/)` (misaki's
link syntax); a bare five-m hum /mmmmm/ was heard as "Mm"/"Mmm" in all nine sentence contexts
tried, where /mmm/ vanished and an h or a stress mark brought words back ("Hemm", "I'm").

The link syntax is hibari's own: other engines would read it aloud, so only hibari's `synthesize`
applies this (tests/test_pronounce.py listens to the result).
"""
from __future__ import annotations

import re

HUM = "mmmmm"
# word (lower case) -> phonemes in hibari's (misaki's) alphabet
PHONEMES: dict[str, str] = {w: HUM for w in ("hm", "hmm", "hmmm", "hmmmm", "mm", "mmm", "mmmm")}

# a whole word only: not part of a longer word or a hyphenated one ("mm-hmm")
_WORDS = re.compile(r"(?<![\w'-])(" + "|".join(sorted(PHONEMES, key=len, reverse=True)) + r")(?![\w'-])",
                    re.IGNORECASE)
_LINK = re.compile(r"\[[^\]]+\]\([^)]*\)")  # hibari's G2P pattern: a link already there is left as it is


def _respell_words(text: str) -> str:
    return _WORDS.sub(lambda m: f"[{m.group(1)}](/{PHONEMES[m.group(1).lower()]}/)", text)


def respell(text: str) -> str:
    """`text` with each word hibari mispronounces given its phonemes, e.g. "Hmm, so." ->
    "[Hmm](/mmmmm/), so."; everything else unchanged."""
    out, pos = [], 0
    for m in _LINK.finditer(text):
        out += [_respell_words(text[pos:m.start()]), m.group(0)]
        pos = m.end()
    return "".join(out) + _respell_words(text[pos:])
