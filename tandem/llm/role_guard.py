"""Stops an oracle where a small LLM starts writing the dialogue transcript instead of a reply.

The oracle prompt shows the conversation as "user: ..." lines, and small models (SmolLM2 among
them) sometimes answer "The user: who wrote the novel 1984." or run on into the next "user:" turn.
Fed to the front-end, that is read aloud. The guard passes text through as it streams, strips a
leading "assistant:", and ends the reply at the first role marker after it. A tail that could be
the start of a marker ("The us") is held back until the next piece shows what it is.

A reply that opens by talking about the dialogue ("The user asked what is the name of...") is an
echo of the prompt, not an answer: it is stopped before any of it passes.

A run of spelled-out letters ("M-H-M-M-I-T-A-N-O...", what SmolLM2 made of a hummed "Mm-hmm" heard as
"M-H-M-M-") is no answer either: the reply ends where such a run of SPELLED_LETTERS or more begins, and
a tail that could begin one ("M-H-", or a lone "M") is held back until the next piece shows what it is.
"""
from __future__ import annotations

import re

ROLES = ("user", "assistant")
_MARKER = re.compile(r"(?<![A-Za-z])(?:user|assistant)\s*:", re.IGNORECASE)
_LEADING_ASSISTANT = re.compile(r"^\s*assistant\s*:\s*", re.IGNORECASE)
ECHO_OPENINGS = ("the user ", "the user's ", "the assistant ", "user ", "the question ")
SPELLED_LETTERS = 4  # "U.S." and "A-G" are words; four letters or more spelled out one by one are not
_SPELLED = re.compile(rf"(?<![A-Za-z0-9'])(?:[A-Za-z][-. ]\s*){{{SPELLED_LETTERS - 1},}}[A-Za-z](?![A-Za-z])")
_SPELLING_TAIL = re.compile(r"(?<![A-Za-z0-9'])(?:[A-Za-z][-. ]\s*)*[A-Za-z][-. ]?$")


def _held_tail(text: str) -> int:
    """Index where a possible unfinished role marker begins at the end of `text` (len if none)."""
    for i in range(len(text) - 1, max(-1, len(text) - 12), -1):
        if i > 0 and text[i - 1].isalpha():
            continue
        tail = re.sub(r"\s+", "", text[i:].lower())
        if tail and any(r + ":" != tail and (r + ":").startswith(tail) for r in ROLES):
            return i
    return len(text)


class RoleEchoGuard:
    def __init__(self) -> None:
        self._pending = ""
        self._said = ""  # the end of what was passed on
        self._started = False  # some reply text has been passed on
        self.stopped = False

    def push(self, delta: str) -> str:
        """The text that may be passed on now; after a marker, `stopped` is set and nothing more passes."""
        if self.stopped:
            return ""
        self._pending += delta
        if not self._started:
            m = _LEADING_ASSISTANT.match(self._pending)
            if m:
                self._pending = self._pending[m.end():]
            opening = " ".join(self._pending.lower().split()) + (" " if self._pending[-1:].isspace() else "")
            if opening and any(o.startswith(opening) for o in ECHO_OPENINGS):
                return ""  # could still become an echo: wait for the next piece
            if any(opening.startswith(o) for o in ECHO_OPENINGS):
                self.stopped = True
                self._pending = ""
                return ""
        m = _MARKER.search(self._pending)
        if m:
            self.stopped = True
            out, self._pending = self._pending[:m.start()], ""
            return self._emit(out.rstrip())
        # spelled letters are looked for across what was passed on last, since a run begins in one piece
        said = len(self._said)
        seen = self._said + self._pending
        m = _SPELLED.search(seen)
        if m:
            self.stopped = True
            out, self._pending = self._pending[:max(0, m.start() - said)], ""
            return self._emit(out.rstrip())
        cut = _held_tail(self._pending)
        spelling = _SPELLING_TAIL.search(seen)
        if spelling:
            cut = min(cut, max(0, spelling.start() - said))
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return self._emit(out)

    def flush(self) -> str:
        """At the end of the stream: whatever was held back was not a marker."""
        out, self._pending = ("" if self.stopped else self._pending), ""
        return self._emit(out)

    def _emit(self, text: str) -> str:
        if not self._started:
            if not text.strip():
                return ""
            self._started = True
        self._said = (self._said + text)[-16:]
        return text
