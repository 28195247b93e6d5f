"""Retrieval + LLM: the passages that best match the user's words go into the prompt, with the
instruction to answer from them (and to say so when they do not hold the answer). The search was
usually run from a partial transcript while the user was still talking (knowledge/base.py), so an
answer request finds its passages ready."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, AsyncIterator

from ..record import timeline as tl
from ..knowledge.base import Retriever
from .base import Note, OracleProvider, OracleRequest, note_nothing


class KnowledgeProvider:
    def __init__(self, retriever: Retriever, inner: OracleProvider) -> None:
        self.retriever = retriever
        self.inner = inner
        self.name = f"knowledge+{inner.name}"

    def observe(self, text: str, final: bool, note: Note = note_nothing) -> None:
        self.retriever.observe(text, final, note)
        self.inner.observe(text, final, note)

    def describe(self, request: OracleRequest) -> dict[str, Any]:
        return self.inner.describe(request)

    async def answer(self, request: OracleRequest, note: Note = note_nothing) -> AsyncIterator[str]:
        hits = await self.retriever.hits(request.standalone, note)
        # the passages' bodies only: their headings find them, but with SmolLM2 they cost answers
        # (chat form, knowledge dev set: 21 of 25 right with bodies, 16 with "title: body")
        context = tuple(h.passage.body for h in hits[: self.retriever.kb.passages])
        if context:
            note(tl.KNOWLEDGE_CONTEXT, stream=request.stream, passages=[h.passage.title for h in hits[: len(context)]])
        async for delta in self.inner.answer(replace(request, context=context), note):
            yield delta
