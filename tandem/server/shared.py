"""Back-end parts shared by every live session of a server, and how they are shared fairly.

- The front-end: one model for all sessions, stepped in one batched call per frame where the
  front-end supports it (`CompactPool`), else one front-end per session stepped in turn.
- The LLM: the embedded llama.cpp server runs one request at a time, so requests wait in arrival
  order for one of `concurrency` slots (a request that goes on from the prompt served last may go
  first for a moment: its prompt is already evaluated). Each session's scheduler keeps at most one request in
  flight (a new one cancels the one it replaces, which also leaves the queue), so arrival order
  is round robin between sessions.
- The TTS: one engine, one synthesis at a time (the voicers of all sessions take turns).
- The Listener process is already shared: one process, one stream per session, finals first.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Protocol

import numpy as np

from ..speak.frontend import FrontEnd, FrontEndOutput, UserFrame
from ..llm.client import ChatClient
from ..speak.tts import TTS


class FrontEndProvider(Protocol):
    name: str

    def open(self, tts: TTS | None) -> FrontEnd:
        """A front-end for one new session."""
        ...

    def step_many(self, fes: list[FrontEnd], users: list[UserFrame], tokens: list[int]) -> list[FrontEndOutput]:
        """One frame for each of `fes` (front-ends this provider opened)."""
        ...


class PerSessionFrontEnds:
    """For front-ends without a shared batched model: one instance per session, stepped in turn."""

    def __init__(self, factory: Callable[[TTS | None], FrontEnd], name: str = "per-session") -> None:
        self.factory = factory
        self.name = name

    def open(self, tts: TTS | None) -> FrontEnd:
        return self.factory(tts)

    def step_many(self, fes: list[FrontEnd], users: list[UserFrame], tokens: list[int]) -> list[FrontEndOutput]:
        return [fe.step(u, t) for fe, u, t in zip(fes, users, tokens)]


class CompactProvider:
    """The compact front-end: one model, every session's step in one batched call."""

    name = "compact"

    def __init__(self, capacity: int, checkpoint: str | None = None) -> None:
        from ..frontends.compact.frontend import CompactPool

        self.pool = CompactPool(checkpoint, capacity=capacity)

    def open(self, tts: TTS | None) -> FrontEnd:
        return self.pool.open(tts)

    def step_many(self, fes, users, tokens):  # noqa: ANN001 - FrontEndProvider
        return self.pool.step_many(fes, users, tokens)


def _shared_messages(a: list[dict[str, str]], b: list[dict[str, str]]) -> int:
    """How many leading messages two prompts have in common."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SharedLLM:
    """A ChatClient shared by all sessions, at most `concurrency` requests at once.

    Requests wait in arrival order, with one exception. A llama.cpp server keeps the state of the
    prompt it evaluated last, and evaluates only what a new prompt adds to it: a session's next
    request (its partial grew by a word) costs about 0.1 s to its first token, another session's
    (another dialogue) about 0.5 s on this machine. So when a slot frees, a waiting request that goes
    on from the prompt served last (it shares more than the system message with it) goes first,
    unless the oldest request has already waited `affinity_wait_s`: no session waits much longer for
    it, and the LLM spends its time on answers instead of on prompts."""

    def __init__(self, client: ChatClient, concurrency: int = 1, affinity_wait_s: float = 0.3) -> None:
        if concurrency < 1:
            raise ValueError("LLM concurrency must be at least 1")
        self.client = client
        self.concurrency = concurrency
        self.affinity_wait_s = affinity_wait_s
        self._free = concurrency
        self._queue: list[tuple[asyncio.Future[None], list[dict[str, str]], float]] = []
        self._last: list[dict[str, str]] = []
        self.waiting = 0
        self.running = 0
        self.stats = {"served": 0, "out_of_turn": 0}
        self.ttfts: deque[float] = deque(maxlen=8)  # every session's streams' time to first token (OracleScheduler)
        self._free_slots = list(range(client.config.slots))  # server slots no session holds

    def for_session(self) -> "SessionLLM":
        """This LLM as one session asks it: pinned to a server slot of its own while there is one free."""
        slot = self._free_slots.pop(0) if self._free_slots else None
        return SessionLLM(self, slot)

    def _give_back(self, slot: int) -> None:
        self._free_slots.append(slot)
        self._free_slots.sort()

    @property
    def config(self):  # noqa: ANN201 - LLMConfig: how the providers ask (its prefill setting among them)
        return self.client.config

    async def _acquire(self, messages: list[dict[str, str]]) -> None:
        if self._free > 0 and not self._queue:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = (fut, messages, time.monotonic())
        self._queue.append(item)
        try:
            await fut
        except asyncio.CancelledError:
            if item in self._queue:
                self._queue.remove(item)
            elif fut.done() and not fut.cancelled():
                self._release()  # granted just as it was cancelled: pass the slot on
            raise

    def _release(self) -> None:
        # the slot is handed on at the loop's next turn: a session that cancels its stream for a newer
        # partial starts the newer request in the same turn, and it is to be among those waiting
        self._free += 1
        asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        while self._free > 0 and self._queue:
            pick = 0
            if self.affinity_wait_s > 0 and time.monotonic() - self._queue[0][2] < self.affinity_wait_s:
                best = max(range(len(self._queue)), key=lambda i: _shared_messages(self._queue[i][1], self._last))
                if _shared_messages(self._queue[best][1], self._last) > 1:  # more than the system message
                    pick = best
            if pick:
                self.stats["out_of_turn"] += 1
            fut = self._queue.pop(pick)[0]
            self._free -= 1
            fut.set_result(None)

    async def stream(self, messages: list[dict[str, str]], max_tokens: int | None = None,
                     slot: int | None = None) -> AsyncIterator[str]:
        self.waiting += 1
        try:
            await self._acquire(messages)
        finally:
            self.waiting -= 1
        self.running += 1
        self.stats["served"] += 1
        self._last = messages
        try:
            async for delta in self.client.stream(messages, max_tokens=max_tokens, slot=slot):
                yield delta
        finally:
            self.running -= 1
            self._release()

    def load(self) -> int:
        """Requests in flight or waiting for a slot, every session's."""
        return self.running + self.waiting

    async def aclose(self) -> None:
        await self.client.aclose()


class SessionLLM:
    """One session's way to the SharedLLM: its requests go to the server slot it holds (None: any), the
    rest is the shared LLM's. `close` gives the slot back."""

    def __init__(self, shared: SharedLLM, slot: int | None) -> None:
        self.shared = shared
        self.slot = slot
        self.config = shared.config
        self.concurrency = shared.concurrency
        self.ttfts = shared.ttfts

    def load(self) -> int:
        return self.shared.load()

    def stream(self, messages: list[dict[str, str]], max_tokens: int | None = None) -> AsyncIterator[str]:
        return self.shared.stream(messages, max_tokens=max_tokens, slot=self.slot)

    def close(self) -> None:
        if self.slot is not None:
            self.shared._give_back(self.slot)
            self.slot = None


class SerializedTTS:
    """One synthesis at a time on a shared engine (each session's Voicer thread calls it)."""

    def __init__(self, tts: TTS) -> None:
        self.tts = tts
        self.sample_rate = tts.sample_rate
        self.repeatable = bool(getattr(tts, "repeatable", False))
        self._lock = threading.Lock()

    def synthesize(self, text: str) -> np.ndarray:
        with self._lock:
            return self.tts.synthesize(text)


@dataclass
class Backend:
    """What the sessions share: the Listener (process or fake), the LLM, the TTS, the front-ends."""
    listener: Any
    llm: SharedLLM | None
    tts: TTS | None
    front_ends: FrontEndProvider | None
    supervisor: Any = None  # tandem.runtime.children.Supervisor watching the child processes, when there are any
    knowledge: Any = None  # tandem.knowledge.KnowledgeBase shared by every session (--knowledge), or None
