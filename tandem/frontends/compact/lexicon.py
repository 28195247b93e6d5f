"""English words from hibari's lexicon. Training gives the tokenizer pieces for them; at run time
they tell which word-start pieces are whole words (the first word of a reply goes to the voice at once)."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path


def english_words() -> list[str]:
    """Real English words from hibari's lexicon (empty when hibari is missing: the tokenizer then
    still works from the synthetic text alone)."""
    try:
        import hibari

        path = Path(hibari.__file__).parent / "assets" / "lexicon_us_gold.json.gz"
        words = json.load(gzip.open(path))
        return [w for w in words if re.fullmatch(r"[A-Za-z]+", w)]
    except Exception:  # noqa: BLE001 - a lexicon that cannot be read is the same as none
        return []
