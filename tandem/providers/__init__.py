"""Oracle providers (base.py has the interface). `for_oracles` and `for_cascade` build a session's:
the same LLM and the same prompt in both modes; with documents, the same passages in both; and in
the tandem, a sentence of a document that answers outright goes first."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..llm.prompt import DEFAULT_FORM
from .base import OracleProvider, OracleRequest
from .chain import FirstOf
from .llm import LLMProvider

if TYPE_CHECKING:
    from ..knowledge.base import KnowledgeBase
    from ..llm.client import ChatClient

__all__ = ["FirstOf", "LLMProvider", "OracleProvider", "OracleRequest", "for_cascade", "for_oracles"]


def for_oracles(client: "ChatClient", knowledge: "KnowledgeBase | None" = None, form: str = DEFAULT_FORM,
                extractive: bool = True) -> OracleProvider:
    llm = LLMProvider(client, form)
    if knowledge is None:
        return llm
    from ..knowledge.base import Retriever
    from .extractive import ExtractiveProvider
    from .knowledge import KnowledgeProvider

    retriever = Retriever(knowledge)
    grounded = KnowledgeProvider(retriever, llm)
    return FirstOf([ExtractiveProvider(retriever), grounded]) if extractive else grounded


def for_cascade(client: "ChatClient", knowledge: "KnowledgeBase | None" = None, form: str = DEFAULT_FORM) -> OracleProvider:
    """The cascade asks the LLM (with the passages) and nothing else: it is the baseline."""
    return for_oracles(client, knowledge, form, extractive=False)
