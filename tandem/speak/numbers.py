"""Numbers as they are spoken: "45" is "forty five". Speech-to-text writes a number either way
(and sometimes both halves apart: "40, five"), so matching compares the spoken form."""
from __future__ import annotations

ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " \
        "sixteen seventeen eighteen nineteen".split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def spoken_number(n: int) -> str | None:
    if 0 <= n < 20:
        return ONES[n]
    if 20 <= n < 100:
        return TENS[n // 10 - 2] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    if 100 <= n < 1000 and n % 100 == 0:
        return ONES[n // 100] + " hundred"
    return None


def spoken_tokens(token: str) -> list[str]:
    """A normalized token in spoken words: "45" -> ["forty", "five"]; anything else as it is."""
    spoken = spoken_number(int(token)) if token.isdigit() and len(token) < 4 else None
    return spoken.split() if spoken else [token]
