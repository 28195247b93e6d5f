"""Knowledge from the user's documents: passages indexed in SQLite FTS5 (index.py), searched off
the frame loop (base.py), and fed to the LLM and the oracle stream by providers
(tandem/providers/knowledge.py, extractive.py)."""
from .base import KnowledgeBase, Retriever
from .documents import KnowledgeError, Passage
from .index import Hit, KnowledgeIndex

__all__ = ["Hit", "KnowledgeBase", "KnowledgeError", "KnowledgeIndex", "Passage", "Retriever"]
