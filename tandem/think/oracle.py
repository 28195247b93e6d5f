"""The oracle stream: reset/append events from the back-end become one token per 80 ms frame.

`KamePolicy` is the published behaviour (REFERENCE 1.1): a reset pins the start token to the
current frame; at frame t the fed token is buffer[t - pinned] while in range, else PAD; a token
whose slot has already passed when it arrives is never fed. Other policies change only how the
buffer maps onto frames, so they can be compared on the same benchmark.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..speak.markup import SpokenWords


@dataclass
class OracleBuffer:
    tokens: list[int] = field(default_factory=list)
    pinned_frame: int | None = None  # frame at which tokens[0] is (or was) fed
    cursor: int = 0  # next index to feed, for policies that play late tokens
    fed: int = 0  # tokens actually fed since the last reset
    last_index: int = -1  # index in `tokens` of the token fed last (training data aligns copies with it)
    dropped: int = 0  # tokens whose slot had passed when they arrived (KAME)
    # prefix-keep policy: a newer oracle collected while the current one keeps playing
    candidate: list[int] | None = None
    kept: int = 0  # newer oracles that continued the current one without a restart
    restarts: int = 0  # newer oracles that restarted the stream (KAME's reset)


class OraclePolicy(Protocol):
    name: str

    def on_reset(self, buf: OracleBuffer, start_token: int, frame: int) -> None: ...

    def on_restart(self, buf: OracleBuffer, start_token: int, frame: int) -> None:
        """A new oracle whose start token is fed at `frame` whatever the policy would otherwise keep."""
        ...

    def on_append(self, buf: OracleBuffer, tokens: list[int], frame: int) -> None: ...

    def on_end(self, buf: OracleBuffer, frame: int) -> None:
        """The stream of the latest reset is complete: nothing more will be appended to it."""
        ...

    def token_at(self, buf: OracleBuffer, frame: int) -> int | None:
        """The token to feed at `frame`, or None for PAD."""
        ...

    def upcoming(self, buf: OracleBuffer, frame: int) -> list[int]:
        """After `token_at(frame)`: the tokens the buffer holds for the frames after it, in order, as far as
        no newer oracle can replace them before they are fed."""
        ...


class KamePolicy:
    name = "kame"

    def on_reset(self, buf: OracleBuffer, start_token: int, frame: int) -> None:
        buf.tokens = [start_token]
        buf.pinned_frame = frame
        buf.cursor = buf.fed = buf.dropped = 0

    def on_restart(self, buf: OracleBuffer, start_token: int, frame: int) -> None:
        buf.candidate = None  # a newer oracle the prefix policy was collecting is given up
        KamePolicy.on_reset(self, buf, start_token, frame)  # KAME's reset, whatever a subclass keeps

    def on_append(self, buf: OracleBuffer, tokens: list[int], frame: int) -> None:
        if buf.pinned_frame is None:
            return  # appends before any reset have no anchor; KAME emits reset first
        first_index = len(buf.tokens)
        buf.tokens.extend(tokens)
        # slots [pinned, frame) have been fed already; frame itself has not been stepped yet
        passed = frame - buf.pinned_frame
        buf.dropped += max(0, min(passed, len(buf.tokens)) - first_index)

    def on_end(self, buf: OracleBuffer, frame: int) -> None:
        pass  # the buffer holds only the latest oracle, so running out of it already ends it

    def token_at(self, buf: OracleBuffer, frame: int) -> int | None:
        if buf.pinned_frame is None:
            return None
        i = frame - buf.pinned_frame
        if 0 <= i < len(buf.tokens):
            buf.fed += 1
            buf.last_index = i
            return buf.tokens[i]
        return None

    def upcoming(self, buf: OracleBuffer, frame: int) -> list[int]:
        if buf.pinned_frame is None:
            return []
        return buf.tokens[max(0, frame + 1 - buf.pinned_frame):]


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
        buf.last_index = buf.cursor
        buf.cursor += 1
        buf.fed += 1
        return tok

    def upcoming(self, buf: OracleBuffer, frame: int) -> list[int]:
        return buf.tokens[buf.cursor:] if buf.pinned_frame is not None else []


class PrefixKeepPolicy(LatePlaybackPolicy):
    """A newer oracle that agrees with what has already been fed continues the stream instead of
    restarting it.

    KAME replays every new oracle from its start token, so when the LLM answers the same thing again
    (a partial transcript and then the final one usually give the same reply) the front-end sees its
    answer restart mid-sentence and must find its place again. Here a reset only opens a candidate;
    while the candidate's tokens match the current buffer nothing changes. At the first difference:
    if that index has not been fed yet, the candidate's tail replaces the buffer's tail (seamless);
    if it has, the stream restarts from the candidate's start token at the current frame, as KAME
    would. A candidate that ends as a strict prefix of the current oracle ("Paris." after "Paris, a
    city of light.") differs at its end: the tail beyond it is cut. Tokens are played in order and
    never dropped (late tokens run late, as in late-playback).
    """

    name = "prefix"

    def on_reset(self, buf: OracleBuffer, start_token: int, frame: int) -> None:
        if buf.pinned_frame is None:
            super().on_reset(buf, start_token, frame)
            return
        buf.candidate = [start_token]

    def on_append(self, buf: OracleBuffer, tokens: list[int], frame: int) -> None:
        if buf.candidate is None:
            super().on_append(buf, tokens, frame)
            return
        cand = buf.candidate
        cand.extend(tokens)
        shared = 0
        for a, b in zip(cand, buf.tokens):
            if a != b:
                break
            shared += 1
        if shared == len(cand):
            return  # so far the candidate repeats the current oracle: keep playing, keep collecting
        buf.candidate = None
        if shared >= buf.cursor:  # the difference has not been fed yet: splice the new tail in
            buf.tokens = buf.tokens[:shared] + cand[shared:]
            buf.kept += 1
        else:  # the front-end has already been fed content the newer oracle contradicts
            buf.tokens = cand
            buf.pinned_frame = frame
            buf.cursor = buf.fed = 0
            buf.restarts += 1

    def upcoming(self, buf: OracleBuffer, frame: int) -> list[int]:
        # while a newer oracle is collected, only what it has repeated so far is sure to be fed
        end = len(buf.candidate) if buf.candidate is not None else len(buf.tokens)
        return buf.tokens[buf.cursor:end] if buf.pinned_frame is not None else []

    def on_end(self, buf: OracleBuffer, frame: int) -> None:
        cand, buf.candidate = buf.candidate, None
        # An open candidate only ever matches the buffer so far (on_append closes it at the first
        # difference), so at its end it is the current oracle or a strict prefix of it. One with no
        # words is no answer (an LLM reply of only whitespace) and must not silence the current one.
        if cand is None or len(cand) <= 1 or len(cand) >= len(buf.tokens):
            return
        # The newer oracle stops here. Content already fed beyond it cannot be taken back, and
        # replaying the newer oracle from its start token would have the front-end say its answer
        # twice; so the stream just stops at whichever comes later.
        buf.tokens = buf.tokens[: max(len(cand), buf.cursor)]
        buf.kept += 1


POLICIES: dict[str, type[KamePolicy]] = {p.name: p for p in (KamePolicy, LatePlaybackPolicy, PrefixKeepPolicy)}
# the default by measurement: docs/BENCHMARKS.md, "Oracle policies"
DEFAULT_POLICY = PrefixKeepPolicy.name


class OracleStream:
    """One session's oracle input. Only the frame loop calls it, so it needs no lock."""

    def __init__(self, start_token: int, pad_token: int, policy: OraclePolicy | None = None) -> None:
        self.start_token = start_token
        self.pad_token = pad_token
        self.policy: OraclePolicy = policy or KamePolicy()
        self.buf = OracleBuffer()

    def reset(self, frame: int, fresh: bool = False) -> None:
        """A new oracle begins. `fresh`: its start token is fed at this frame whatever the policy would keep
        (the reply that was reading the old one was dropped: the front-end needs to hear a new answer begin,
        even one that repeats the old words)."""
        (self.policy.on_restart if fresh else self.policy.on_reset)(self.buf, self.start_token, frame)

    def append(self, tokens: list[int], frame: int) -> None:
        self.policy.on_append(self.buf, list(tokens), frame)

    def end(self, frame: int) -> None:
        """The oracle of the latest reset is complete (its LLM stream ended)."""
        self.policy.on_end(self.buf, frame)

    def token(self, frame: int) -> int:
        """The token to feed at `frame`; call once per frame, in order."""
        tok = self.policy.token_at(self.buf, frame)
        return self.pad_token if tok is None else tok

    def upcoming(self, frame: int) -> tuple[int, ...]:
        """After `token(frame)`: the tokens to be fed in the frames after it (the oracle's words already
        here, not yet fed), as far as a newer oracle cannot replace them first."""
        return tuple(self.policy.upcoming(self.buf, frame))


def make_policy(name: str) -> OraclePolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown oracle policy {name!r}; choose from {', '.join(POLICIES)}") from None


class WordBuffer:
    """Streamed LLM text -> complete words. Tokenising each chunk on its own would split words
    differently from tokenising the whole text (\"Paris\" + \".\" is not \"Paris.\"); a word is only
    complete once whitespace follows it or the stream ends. Words come out as said (speak/markup.py:
    a list number or bullet is not)."""

    def __init__(self) -> None:
        self.buf = ""
        self.words = SpokenWords()

    def reset(self) -> None:
        self.buf = ""
        self.words.reset()

    def push(self, text: str) -> str:
        self.buf += text
        cut = max(self.buf.rfind(" "), self.buf.rfind("\n"))
        if cut <= 0:
            return ""
        done, self.buf = self.buf[:cut], self.buf[cut:]
        return self.words.push(done)

    def flush(self) -> str:
        done, self.buf = self.words.push(self.buf), ""
        return " ".join(w for w in (done, self.words.flush()) if w)
