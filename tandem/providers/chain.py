"""Several providers asked in order: the first that answers is streamed, the others not asked."""
from __future__ import annotations

from contextlib import aclosing
from typing import Any, AsyncIterator, Sequence

from .base import Note, OracleProvider, OracleRequest, note_nothing


class FirstOf:
    def __init__(self, providers: Sequence[OracleProvider]) -> None:
        if not providers:
            raise ValueError("FirstOf needs at least one provider")
        self.providers = list(providers)
        self.name = "+".join(p.name for p in self.providers)

    def observe(self, text: str, final: bool, note: Note = note_nothing) -> None:
        for p in self.providers:
            p.observe(text, final, note)

    def describe(self, request: OracleRequest) -> dict[str, Any]:
        return self.providers[-1].describe(request)

    async def answer(self, request: OracleRequest, note: Note = note_nothing) -> AsyncIterator[str]:
        for p in self.providers:
            gave = False
            async with aclosing(p.answer(request, note)) as deltas:
                async for delta in deltas:
                    gave = True
                    yield delta
            if gave:
                return
