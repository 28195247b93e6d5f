"""How the compact front-end hears the user: transcript text becomes a token stream, one token per
frame, and voice activity becomes a bucket. Shared by inference and the training-data builder so
both see exactly the same thing."""
from __future__ import annotations

from collections import deque

VAD_BUCKETS = 8


def vad_bucket(p: float) -> int:
    return min(VAD_BUCKETS - 1, max(0, int(p * VAD_BUCKETS)))


def transcript_delta(old: str, new: str) -> str:
    """The words of `new` after its longest common word prefix with `old` (revisions re-send their tail)."""
    a, b = old.split(), new.split()
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return " ".join(b[i:])


class UserTokenQueue:
    """Transcript updates in, two user tokens per frame out (PAD when there is nothing new).
    A backlog beyond `max_backlog` keeps only its newest tokens: a burst (a long revision, a
    recogniser glitch) must not keep the stream busy long after the user stopped talking."""

    def __init__(self, encode, pad: int, max_backlog: int = 16) -> None:
        self.encode = encode
        self.pad = pad
        self.max_backlog = max_backlog
        self.seen = ""
        self.queue: deque[int] = deque()

    def update(self, transcript: str) -> None:
        if transcript == self.seen or not transcript.strip():
            return
        delta = transcript_delta(self.seen, transcript)
        self.seen = transcript
        if delta:
            self.queue.extend(self.encode(" " + delta))
            while len(self.queue) > self.max_backlog:
                self.queue.popleft()

    def next(self, n: int = 2) -> list[int]:
        """The next `n` tokens (one per user slot of the frame), PAD-filled."""
        return [self.queue.popleft() if self.queue else self.pad for _ in range(n)]
