"""Back-end parts shared by every live session of a server, and how they are shared fairly.

- The front-end: one model for all sessions, stepped in one batched call per frame where the
  front-end supports it (`CompactPool`), else one front-end per session stepped in turn.
- The LLM: the embedded llama.cpp server runs one request at a time, so requests wait in arrival
  order for one of `concurrency` slots. Each session's scheduler keeps at most one request in
  flight (a new one cancels the one it replaces, which also leaves the queue), so arrival order
  is round robin between sessions.
- The TTS: one engine, one synthesis at a time (the voicers of all sessions take turns).
- The Listener process is already shared: one process, one stream per session, finals first.
"""
from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator, Callable, Protocol

import numpy as np

from ..frontend import FrontEnd, FrontEndOutput, UserFrame
from ..llm.client import ChatClient
from ..tts import TTS


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


class SharedLLM:
    """A ChatClient shared by all sessions, at most `concurrency` requests at once, FIFO."""

    def __init__(self, client: ChatClient, concurrency: int = 1) -> None:
        if concurrency < 1:
            raise ValueError("LLM concurrency must be at least 1")
        self.client = client
        self.concurrency = concurrency
        self._sem = asyncio.Semaphore(concurrency)
        self.waiting = 0
        self.running = 0

    async def stream(self, messages: list[dict[str, str]], max_tokens: int | None = None) -> AsyncIterator[str]:
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            async for delta in self.client.stream(messages, max_tokens=max_tokens):
                yield delta
        finally:
            self.running -= 1
            self._sem.release()

    def load(self) -> int:
        """Requests in flight or waiting for a slot, every session's."""
        return self.running + self.waiting

    async def aclose(self) -> None:
        await self.client.aclose()


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
