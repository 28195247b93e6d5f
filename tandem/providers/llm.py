"""The LLM as an oracle provider: the conversation as the one shared prompt (tandem/llm/prompt.py),
streamed from any OpenAI-compatible server."""
from __future__ import annotations

from typing import Any, AsyncIterator

from ..llm.client import ChatClient
from ..llm.prompt import DEFAULT_FORM, answer_messages, describe
from .base import Note, OracleRequest, note_nothing


class LLMProvider:
    name = "llm"

    def __init__(self, client: ChatClient, form: str = DEFAULT_FORM) -> None:
        self.client = client
        self.form = form

    def messages(self, request: OracleRequest) -> list[dict[str, str]]:
        return answer_messages(request.turns, request.partial, request.context, self.form, request.asked)

    def observe(self, text: str, final: bool, note: Note = note_nothing) -> None:
        pass

    def describe(self, request: OracleRequest) -> dict[str, Any]:
        return describe(self.messages(request))

    async def answer(self, request: OracleRequest, note: Note = note_nothing) -> AsyncIterator[str]:
        async for delta in self.client.stream(self.messages(request), max_tokens=request.max_tokens):
            yield delta
