"""Audible self-repairs: what a listener hears as a stumble in a reply, read off the heard transcript.

The measure of issue 42: a reply is fluent when its heard words hold no apology that corrects it ("It is
not a place, but sorry, it is Buenos Aires."), no restart ("I- sorry," "I'm... the name?"), no word or
phrase said twice in a row, no hesitation sound ("um"), and no sentence left unfinished when the voice
stopped. It is read off what the user hears (Whisper on the assistant's audio), never the model's own
text: a repair the voice swallowed is no stumble, a doubled word the model did not write is one. The
same rules are applied to the model's text beside it, to tell which stumbles the voice adds.

The heard text comes from a transcription of the reply's audible stretch alone, with no prompt: over
the silence after a reply Whisper writes words nobody said ("Thank you.", "Bye bye.", "and and"), and
a prompt makes it write more of them.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..audio.frames import AUDIBLE, SAMPLE_RATE

if TYPE_CHECKING:
    from .scoring import Transcriber

KINDS = ("apology", "restart", "repeat", "filler", "unfinished")
APOLOGIES = {"sorry", "apologies", "apologize", "apologise", "pardon"}
# "sorry" before these declines or sympathises ("I'm sorry, but I can't", "sorry for the wait"): no repair
DECLINING = {"for", "but", "i", "i'm", "to", "about", "we", "that", "if", "though"}
FILLERS = {"um", "uh", "er", "erm", "uhm", "umm", "uhh"}
# words people say twice on purpose
DOUBLED_ON_PURPOSE = {"very", "bye", "ha", "no", "yes", "yeah", "so", "really", "many", "far", "long"}
CUT = ("-", "\u2014", "\u2013")  # how Whisper writes a word broken off
TRAILING = "..."
SHORT_FRAGMENT = 3  # words of a sentence broken off with "..." that start no sentence (a pause inside a long one is not)
PAD_S = 0.1  # audio kept after the last audible sample: a word's tail, not the silence Whisper fills
END_QUIET_S = 0.5  # a reply whose voice stopped this long before the recording's end ended on its own


@dataclass(frozen=True)
class Repair:
    kind: str  # one of KINDS
    at: str  # the heard words around it


def _norm(token: str) -> str:
    return re.sub(r"[^a-z0-9']", "", token.lower())


def self_repairs(text: str, judge_end: bool = True) -> list[Repair]:
    """The audible self-repairs in `text` (one reply as heard, punctuation as Whisper writes it).
    `judge_end`: the voice stopped by itself, so a reply that ends broken off is unfinished (False when
    the recording, or the user cutting in, ended it)."""
    toks = text.split()
    words = [_norm(t) for t in toks]
    out: list[Repair] = []

    def around(i: int, j: int | None = None) -> str:
        return " ".join(toks[max(0, i - 3): (j if j is not None else i + 1) + 3])

    sentence_start = 0
    for i, (tok, w) in enumerate(zip(toks, words)):
        last = i == len(toks) - 1
        nxt = words[i + 1] if not last else None
        if w in APOLOGIES and not last and nxt not in DECLINING:
            out.append(Repair("apology", around(i)))
        elif w == "i" and nxt == "mean" and i + 2 < len(toks):
            out.append(Repair("apology", around(i, i + 1)))
        if w in FILLERS and not tok.strip(".,!?").isupper():  # "ER" is an acronym, "er," a hesitation
            out.append(Repair("filler", around(i)))
        elif w and nxt == w and w not in DOUBLED_ON_PURPOSE and not w.isdigit():
            out.append(Repair("repeat", around(i, i + 1)))
        elif i >= 1 and i + 2 < len(toks) and words[i - 1: i + 1] == words[i + 1: i + 3] and all(words[i - 1: i + 1]):
            out.append(Repair("repeat", around(i - 1, i + 2)))
        broken = tok.endswith(CUT) or (tok.endswith(TRAILING) and i - sentence_start + 1 <= SHORT_FRAGMENT)
        if broken and not last:
            out.append(Repair("restart", around(i)))
        elif (tok.endswith(CUT) or tok.endswith(TRAILING)) and last and judge_end:
            out.append(Repair("unfinished", around(i)))
        if tok.endswith((".", "?", "!", *CUT)):
            sentence_start = i + 1
    return out


def audible_span(assistant: np.ndarray, start: int = 0, stop: int | None = None) -> tuple[int, int] | None:
    """The first and last audible sample of assistant[start:stop] (absolute indices), or None."""
    loud = np.flatnonzero(np.abs(assistant[start:stop]) > AUDIBLE)
    return (start + int(loud[0]), start + int(loud[-1]) + 1) if len(loud) else None


def heard_reply(transcriber: "Transcriber", assistant: np.ndarray, start: int = 0,
                stop: int | None = None) -> tuple[str, bool]:
    """What the listener heard of assistant[start:stop], transcribed over its audible stretch alone,
    and whether the voice stopped END_QUIET_S before `stop` (it was not cut by the window's end)."""
    stop = len(assistant) if stop is None else stop
    span = audible_span(assistant, start, stop)
    if span is None:
        return "", True
    a, b = span
    words = transcriber.words(assistant[max(start, a - int(PAD_S * SAMPLE_RATE)): min(stop, b + int(PAD_S * SAMPLE_RATE))])
    return " ".join(w.text for w in words), stop - b >= END_QUIET_S * SAMPLE_RATE


def fluency(transcriber: "Transcriber", assistant: np.ndarray, said_text: str,
            windows: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """A run's fluency record: the heard replies, their self-repairs, and those in the model's own text.
    `windows`: (start, stop) samples of each reply (a dialogue's turns, each to the next user turn; a
    reply cut there is not unfinished), default the whole channel as one."""
    windows = windows or [(0, len(assistant))]
    # a voice that said a whole sentence and stopped by itself left nothing unfinished, whatever Whisper ends it
    # with: unprompted it heard "It is Seoul." as "It is so..."
    said_whole = said_text.rstrip().endswith((".", "?", "!"))
    heard, found = [], []
    for k, (a, b) in enumerate(windows):
        text, ended = heard_reply(transcriber, assistant, a, b)
        heard.append(text)
        found += self_repairs(text, judge_end=ended and k == len(windows) - 1 and not said_whole)
    return {"heard_plain": " / ".join(heard), "repairs": [asdict(r) for r in found], "fluent": not found,
            "repairs_in_text": [asdict(r) for r in self_repairs(said_text, judge_end=False)]}


def fluency_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Replies with a heard self-repair, their share, counts by kind, and the same read in the model's text."""
    judged = [r for r in runs if "fluent" in r]
    stumbled = [r for r in judged if not r["fluent"]]
    kinds = {k: sum(1 for r in stumbled for x in r["repairs"] if x["kind"] == k) for k in KINDS}
    return {"self_repairs": f"{len(stumbled)}/{len(judged)}",
            "self_repair_rate": round(len(stumbled) / len(judged), 4) if judged else None,
            "repair_kinds": {k: v for k, v in kinds.items() if v},
            "repairs_in_text": f"{sum(1 for r in judged if r['repairs_in_text'])}/{len(judged)}"}


def repair_examples(runs: list[dict[str, Any]], label: str, limit: int = 12) -> list[str]:
    """Markdown lines: each stumbling reply's id, mode, kinds and heard words."""
    lines = []
    for r in [r for r in runs if r.get("fluent") is False][:limit]:
        kinds = ", ".join(sorted({x["kind"] for x in r["repairs"]}))
        lines.append(f"- {r.get(label)} ({r.get('variant', r.get('mode'))}; {kinds}): \"{r['heard_plain']}\"")
    return lines


__all__ = ["KINDS", "Repair", "audible_span", "fluency", "fluency_summary", "heard_reply", "repair_examples",
           "self_repairs"]
