"""The passages of a knowledge folder in an SQLite FTS5 index (the standard library's sqlite3), kept on
disk and brought up to date per document: a file whose size and modification time are as recorded
is not read again; one that changed is hashed, and re-split and re-indexed only if its bytes did;
removed files lose their passages. Ranking is FTS5's BM25 over the Porter-stemmed words of each
passage's title and body.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from .documents import KnowledgeError, Passage, list_documents, read_text, split_passages
from .query import fts_query

log = logging.getLogger(__name__)

SCHEMA = 2  # bump when the splitter or the table layout changes: every index is then rebuilt


def cache_dir() -> Path:
    base = os.environ.get("TANDEM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tandem")
    return Path(base) / "knowledge"


def default_index_path(root: Path) -> Path:
    key = hashlib.sha1(str(Path(root).resolve()).encode()).hexdigest()[:16]
    return cache_dir() / f"{Path(root).resolve().name or 'root'}-{key}.sqlite"


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float  # BM25, higher is better (FTS5's rank negated)


@dataclass
class UpdateStats:
    documents: int = 0
    passages: int = 0
    reused: int = 0  # documents found unchanged
    indexed: int = 0  # documents (re)split and (re)indexed
    removed: int = 0  # documents gone since the last update
    skipped: list[str] = field(default_factory=list)  # "path: why" for files that could not be used
    seconds: float = 0.0


class KnowledgeIndex:
    """One index file over one knowledge root. Open with `KnowledgeIndex.open(root)`, which brings the
    index up to date. Not thread-safe: one connection, used from one thread (`KnowledgeBase` runs
    every query on a thread of its own)."""

    def __init__(self, root: Path, path: Path) -> None:
        self.root = Path(root)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, check_same_thread=False)
        try:
            self._ensure_schema()
        except sqlite3.DatabaseError as e:  # not an index (a crash mid-write, another file): start anew
            log.warning("knowledge: %s is not a usable index (%s); rebuilding it", self.path, e)
            self.db.close()
            self.path.unlink()
            self.db = sqlite3.connect(self.path, check_same_thread=False)
            self._ensure_schema()
        self.stats = UpdateStats()

    @classmethod
    def open(cls, root: Path, path: Path | None = None, progress: bool = True) -> "KnowledgeIndex":
        idx = cls(root, path or default_index_path(root))
        idx.update(progress=progress)
        return idx

    def _ensure_schema(self) -> None:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.DatabaseError:
            row = None
        if row is None or row[0] != str(SCHEMA):
            self.db.executescript(
                "DROP TABLE IF EXISTS passages; DROP TABLE IF EXISTS docs; DROP TABLE IF EXISTS meta;"
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                "CREATE TABLE docs(path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, sha256 TEXT, passages INTEGER);"
                "CREATE VIRTUAL TABLE passages USING fts5(title, body, path UNINDEXED, pos UNINDEXED,"
                " tokenize='porter unicode61');")
            self.db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
            self.db.commit()

    def update(self, progress: bool = True) -> UpdateStats:
        """Bring the index in line with the files under the root. Raises KnowledgeError when no
        document gives a passage."""
        from tqdm import tqdm

        t0 = time.perf_counter()
        st = UpdateStats()
        files = list_documents(self.root)
        base = self.root if self.root.is_dir() else self.root.parent
        known = {r[0]: r[1:] for r in self.db.execute("SELECT path, size, mtime_ns, sha256 FROM docs")}
        seen: set[str] = set()
        bar = tqdm(files, desc="indexing documents", unit="file", disable=not progress or len(files) < 2,
                   leave=False)
        for f in bar:
            rel = str(f.relative_to(base))
            seen.add(rel)
            try:
                s = f.stat()
            except OSError as e:
                st.skipped.append(f"{rel}: cannot be read ({e.strerror or e})")
                continue
            old = known.get(rel)
            if old is not None and old[0] == s.st_size and old[1] == s.st_mtime_ns:
                st.reused += 1
                continue
            try:
                text = read_text(f)
            except KnowledgeError as e:
                st.skipped.append(str(e))
                if old is not None:
                    self._drop(rel)
                continue
            digest = hashlib.sha256(text.encode()).hexdigest()
            if old is not None and old[2] == digest:  # touched, not changed
                self.db.execute("UPDATE docs SET size=?, mtime_ns=? WHERE path=?", (s.st_size, s.st_mtime_ns, rel))
                st.reused += 1
                continue
            self._drop(rel)
            passages = split_passages(rel, text)
            self.db.executemany("INSERT INTO passages(title, body, path, pos) VALUES (?, ?, ?, ?)",
                                [(p.title, p.body, p.path, p.pos) for p in passages])
            self.db.execute("INSERT INTO docs VALUES (?, ?, ?, ?, ?)",
                            (rel, s.st_size, s.st_mtime_ns, digest, len(passages)))
            st.indexed += 1
        for rel in set(known) - seen:
            self._drop(rel)
            st.removed += 1
        self.db.commit()
        for why in st.skipped:
            log.warning("knowledge: skipped %s", why)
        st.documents = self.db.execute("SELECT count(*) FROM docs WHERE passages > 0").fetchone()[0]
        st.passages = self.db.execute("SELECT count(*) FROM passages").fetchone()[0]
        st.seconds = time.perf_counter() - t0
        self.stats = st
        if st.passages == 0:
            why = f" ({len(st.skipped)} file(s) skipped: {'; '.join(st.skipped[:3])})" if st.skipped else ""
            raise KnowledgeError(f"--knowledge: {self.root} gave no passages: its documents hold no text{why}")
        log.info("knowledge: %d documents, %d passages (%d reused, %d indexed, %d removed) in %.2f s; index %s",
                 st.documents, st.passages, st.reused, st.indexed, st.removed, st.seconds, self.path)
        return st

    def _drop(self, rel: str) -> None:
        self.db.execute("DELETE FROM passages WHERE path=?", (rel,))
        self.db.execute("DELETE FROM docs WHERE path=?", (rel,))

    def search(self, text: str, k: int = 3) -> list[Hit]:
        """The `k` best passages for `text` (a question, or a partial transcript of one)."""
        q = fts_query(text)
        if not q:
            return []
        rows = self.db.execute(
            "SELECT title, body, path, pos, rank FROM passages WHERE passages MATCH ? ORDER BY rank LIMIT ?",
            (q, k)).fetchall()
        return [Hit(Passage(path, int(pos), title, body), -float(rank)) for title, body, path, pos, rank in rows]

    @property
    def size_bytes(self) -> int:
        return self.path.stat().st_size

    def close(self) -> None:
        self.db.close()
