"""Searching the index off the frame loop, and a session's retrievals launched while the user speaks.

`KnowledgeBase` owns the index and the one thread every query runs on (an SQLite connection is used
from one thread; a query takes about a millisecond, so one thread serves many sessions). A
`Retriever` belongs to one session: it searches as soon as the user's partial transcript holds
enough content words and again whenever they change, keeps the results for the turn, and hands an
answer request the passages for the words it was asked with, searching only if they were never
searched.
"""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from ..record.timeline import RETRIEVAL
from .index import Hit, KnowledgeIndex
from .query import content_words

log = logging.getLogger(__name__)

Note = Callable[..., None]


class KnowledgeBase:
    def __init__(self, index: KnowledgeIndex, passages: int = 1) -> None:
        self.index = index
        self.passages = passages  # how many passages go into a prompt
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="knowledge")

    @classmethod
    def open(cls, root: Path, index_path: Path | None = None, passages: int = 1,
             progress: bool = True) -> "KnowledgeBase":
        return cls(KnowledgeIndex.open(Path(root), index_path, progress=progress), passages)

    def search_now(self, text: str, k: int | None = None) -> list[Hit]:
        """On the calling thread (benchmarks, tests); sessions use `search`."""
        return self.index.search(text, k or self.passages)

    async def search(self, text: str, k: int | None = None) -> list[Hit]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.index.search, text, k or max(self.passages, 3))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.index.close()

    def __enter__(self) -> "KnowledgeBase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Retriever:
    """One session's retrievals. `observe` on each transcript of the user's turn; `hits` for an answer."""

    MIN_WORDS = 2  # content words a partial needs before it is worth a search
    KEPT = 16

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self._turn: dict[str, asyncio.Future[list[Hit]]] = {}  # content-word key -> its search
        self._last_key = ""
        self._new_turn = False
        self._previous_turn = ""  # the last turn's words, for a follow-up too short to search alone
        self._observed: tuple[str, bool] = ("", False)
        self.stats = {"searches": 0, "reused": 0}

    @staticmethod
    def key(text: str) -> str:
        return " ".join(sorted(content_words(text)))

    def query_for(self, question: str) -> str:
        """What to search with: the turn's words, and the previous turn's when these alone are too
        few ("and the kettle?")."""
        if len(content_words(question)) >= self.MIN_WORDS or not self._previous_turn:
            return question
        return f"{self._previous_turn} {question}"

    def observe(self, text: str, final: bool, note: Note) -> None:
        if (text, final) == self._observed:
            return  # several providers share this retriever and each passes the transcript on
        self._observed = (text, final)
        if self._new_turn and text.strip():
            self._turn.clear()
            self._new_turn = False
        query = self.query_for(text)
        key = self.key(query)
        if len(key.split()) >= self.MIN_WORDS and key != self._last_key:
            self._last_key = key
            self._search(query, key, "final" if final else "partial", note)
        if final and text.strip():
            self._previous_turn = text
            self._new_turn = True  # the next words the user says start a new turn's searches

    def _search(self, query: str, key: str, trigger: str, note: Note) -> asyncio.Future[list[Hit]]:
        fut = self._turn.get(key)
        if fut is not None:
            return fut
        while len(self._turn) >= self.KEPT:
            self._turn.pop(next(iter(self._turn)))
        t0 = time.perf_counter()
        self.stats["searches"] += 1
        fut = asyncio.ensure_future(self.kb.search(query))
        self._turn[key] = fut

        def done(f: asyncio.Future[list[Hit]]) -> None:
            ms = round((time.perf_counter() - t0) * 1e3, 2)
            if f.cancelled():
                return
            if f.exception() is not None:
                log.warning("knowledge search failed: %s", f.exception())
                note(RETRIEVAL, query=query, trigger=trigger, ms=ms, error=str(f.exception()))
                return
            note(RETRIEVAL, query=query, trigger=trigger, ms=ms, passages=[
                {"title": h.passage.title, "path": h.passage.path, "pos": h.passage.pos,
                 "score": round(h.score, 3), "text": h.passage.body[:160]} for h in f.result()])

        fut.add_done_callback(done)
        return fut

    async def hits(self, question: str, note: Note) -> list[Hit]:
        """The passages for `question`, from this turn's searches when its words were searched."""
        query = self.query_for(question)
        key = self.key(query)
        if not key:
            return []
        if key in self._turn:
            self.stats["reused"] += 1
        fut = self._search(query, key, "answer", note)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - noted by the search's callback; answer without passages
            return []
