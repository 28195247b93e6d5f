"""The oracle stream: reset/append events from the back-end become one token per 80 ms frame.

`KamePolicy` is the published behaviour (REFERENCE 1.1): a reset pins the start token to the
current frame; at frame t the fed token is buffer[t - pinned] while in range, else PAD; a token
whose slot has already passed when it arrives is never fed. Other policies change only how the
buffer maps onto frames, so they can be compared on the same benchmark.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class OracleBuffer:
    tokens: list[int] = field(default_factory=list)
    pinned_frame: int | None = None  # frame at which tokens[0] is (or was) fed
    cursor: int = 0  # next index to feed, for policies that play late tokens
    fed: int = 0  # tokens actually fed since the last reset
    dropped: int = 0  # tokens whose slot had passed when they arrived (KAME)


class OraclePolicy(Protocol):
    name: str

    def on_reset(self, buf: OracleBuffer, start_token: int, frame: int) -> None: ...

    def on_append(self, buf: OracleBuffer, tokens: list[int], frame: int) -> None: ...

    def token_at(self, buf: OracleBuffer, frame: int) -> int | None:
        """The token to feed at `frame`, or None for PAD."""
        ...


class KamePolicy:
    name = "kame"

    def on_reset(self, buf: OracleBuffer, start_token: int, frame: int) -> None:
        buf.tokens = [start_token]
        buf.pinned_frame = frame
        buf.cursor = buf.fed = buf.dropped = 0

    def on_append(self, buf: OracleBuffer, tokens: list[int], frame: int) -> None:
        if buf.pinned_frame is None:
            return  # appends before any reset have no anchor; KAME emits reset first
        first_index = len(buf.tokens)
        buf.tokens.extend(tokens)
        # slots [pinned, frame) have been fed already; frame itself has not been stepped yet
        passed = frame - buf.pinned_frame
        buf.dropped += max(0, min(passed, len(buf.tokens)) - first_index)

    def token_at(self, buf: OracleBuffer, frame: int) -> int | None:
        if buf.pinned_frame is None:
            return None
        i = frame - buf.pinned_frame
        if 0 <= i < len(buf.tokens):
            buf.fed += 1
            return buf.tokens[i]
        return None


class LatePlaybackPolicy(KamePolicy):
    """Like KAME, but a token that arrives after its slot is played at the next free frame
    instead of being dropped: the stream never skips content, it only runs late."""

    name = "late-playback"

    def on_append(self, buf: OracleBuffer, tokens: list[int], frame: int) -> None:
        if buf.pinned_frame is not None:
            buf.tokens.extend(tokens)

    def token_at(self, buf: OracleBuffer, frame: int) -> int | None:
        if buf.pinned_frame is None or frame < buf.pinned_frame or buf.cursor >= len(buf.tokens):
            return None
        tok = buf.tokens[buf.cursor]
        buf.cursor += 1
        buf.fed += 1
        return tok


POLICIES: dict[str, type[KamePolicy]] = {p.name: p for p in (KamePolicy, LatePlaybackPolicy)}


class OracleStream:
    """One session's oracle input. Only the frame loop calls it, so it needs no lock."""

    def __init__(self, start_token: int, pad_token: int, policy: OraclePolicy | None = None) -> None:
        self.start_token = start_token
        self.pad_token = pad_token
        self.policy: OraclePolicy = policy or KamePolicy()
        self.buf = OracleBuffer()

    def reset(self, frame: int) -> None:
        self.policy.on_reset(self.buf, self.start_token, frame)

    def append(self, tokens: list[int], frame: int) -> None:
        self.policy.on_append(self.buf, list(tokens), frame)

    def token(self, frame: int) -> int:
        """The token to feed at `frame`; call once per frame, in order."""
        tok = self.policy.token_at(self.buf, frame)
        return self.pad_token if tok is None else tok


def make_policy(name: str) -> OraclePolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown oracle policy {name!r}; choose from {', '.join(POLICIES)}") from None
