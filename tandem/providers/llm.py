"""The LLM as an oracle provider: the conversation as the one shared prompt (tandem/llm/prompt.py),
streamed from any OpenAI-compatible server.

Where the server goes on from a reply's first words (LLMConfig.prefill), the request's restated
opening ("The capital of Peru is") is given as the reply's beginning. The LLM then says the answer
word first instead of restating the question: with SmolLM2 on 61 dev questions (text only) the answer
word came 7 stream pieces in (median) asked alone, 2 given the opening, and it was right on 46 of them
against 44 (docs/history/BENCHMARKS-rounds.md, thirteenth round; scripts/prefill_probe.py)."""
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
        messages = answer_messages(request.turns, request.partial, request.context, self.form, request.asked)
        # not with passages: an opening forces an answer's shape on them, where the answer may be that
        # the documents do not say
        if request.opening and not request.context and self.client.config.prefill:
            messages.append({"role": "assistant", "content": request.opening})
        return messages

    @property
    def continues_replies(self) -> bool:
        """The server goes on from a reply begun for it (the scheduler then keeps an opening it began)."""
        return bool(self.client.config.prefill)

    def observe(self, text: str, final: bool, note: Note = note_nothing) -> None:
        pass

    def describe(self, request: OracleRequest) -> dict[str, Any]:
        return describe(self.messages(request))

    async def answer(self, request: OracleRequest, note: Note = note_nothing) -> AsyncIterator[str]:
        messages = self.messages(request)
        deltas = self.client.stream(messages, max_tokens=request.max_tokens)
        if messages[-1]["role"] == "assistant":
            deltas = with_opening(messages[-1]["content"], deltas)
        async for delta in deltas:
            yield delta


async def with_opening(opening: str, deltas: AsyncIterator[str]) -> AsyncIterator[str]:
    """A continued reply as a whole one: llama-server's stream begins with the opening it was given,
    others (vLLM's continue_final_message) send only what follows it, which gets the opening put back."""
    head: str | None = ""
    async for delta in deltas:
        if head is None:
            yield delta
            continue
        head += delta
        if len(head) < len(opening) and opening.startswith(head):
            continue  # not yet known whether the opening comes back
        if not head.startswith(opening):
            head = opening + ("" if head[:1].isspace() or head[:1] in ",.;:!?" else " ") + head
        yield head
        head = None
    if head:  # the stream ended before the opening was through
        yield opening if opening.startswith(head) else opening + " " + head
