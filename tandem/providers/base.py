"""Oracle providers: where oracle text comes from.

A provider turns the conversation so far into a stream of answer text, asynchronously, off the frame
loop. The LLM is one provider (`llm.py`); retrieval over the user's documents feeding the LLM
(`knowledge.py`), a sentence of a document that answers the question outright (`extractive.py`), or a
tool are others; `FirstOf` (`chain.py`) asks several in order and streams the first that answers.
The scheduler (tandem/turn/scheduler.py) decides when to ask and which stream the oracle stream feeds;
the cascade asks its provider once per final transcript. A new provider is one module with a class
that has these three methods (docs/DESIGN.md, "Oracle providers").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Protocol

Note = Callable[..., None]  # note(kind, **data): an event on the session's timeline


@dataclass(frozen=True)
class OracleRequest:
    turns: tuple[tuple[str, str], ...]  # the dialogue so far: ("user" | "assistant", text), as heard and as spoken
    partial: str = ""  # the user's live partial transcript ("" once the turn is final)
    question: str = ""  # the user's current turn: its finals and the partial
    asked: str = ""  # the same as a question that stands alone, where it is a follow-up fragment (followup.py)
    context: tuple[str, ...] = ()  # passages the answer is to come from (set by a retrieval provider)
    # the reply's first words as the question gives them ("The capital of Peru is", restate.py): an LLM
    # that goes on from them says the answer word first instead of restating the question
    opening: str = ""
    max_tokens: int = 60
    stream: int = 0  # the scheduler's stream id, for timeline events

    @property
    def standalone(self) -> str:
        """What the user asks, in words that need no earlier turn: what to search and restate with."""
        return self.asked or self.question


def note_nothing(kind: str, **data: Any) -> None:
    pass


class OracleProvider(Protocol):
    name: str

    def observe(self, text: str, final: bool, note: Note = note_nothing) -> None:
        """The user's current turn as heard now (each partial and final): a chance to start work
        early, such as a retrieval, before any answer is asked for. Must not block."""

    def describe(self, request: OracleRequest) -> dict[str, Any]:
        """What this provider will ask with, for the timeline (cheap, synchronous)."""

    def answer(self, request: OracleRequest, note: Note = note_nothing) -> AsyncIterator[str]:
        """The answer as text deltas. Yielding nothing means "no answer" (a chain then asks the next
        provider). Raises LLMError (or another ProviderError) when it fails; closing the iterator
        cancels the work."""
