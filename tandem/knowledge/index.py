"""The passages of a knowledge folder in an SQLite FTS5 index (the standard library's sqlite3), kept on
disk and brought up to date per document: a file whose size and modification time are as recorded
is not read again; one that changed is hashed, and re-split and re-indexed only if its bytes did;
removed files lose their passages. Ranking is FTS5's BM25 over the Porter-stemmed words of each
passage's title and body.
"""
from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..runtime.cache import cache_root
from .documents import KnowledgeError, Passage, list_documents, read_text, split_passages
from .query import fts_match, query_terms

log = logging.getLogger(__name__)

SCHEMA = 3  # bump when the splitter or the table layout changes: every index is then rebuilt
COMMON = 0.1  # a term in more passages than this share ranks little and costs a long scan: left out
COMMON_MIN = 50  # ...and in more than this many: in a small corpus every term is kept
MAX_TERMS = 8  # the rarest terms of a query are searched (a long partial names its subject early)


def cache_dir() -> Path:
    return cache_root() / "knowledge"


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
        self._df: dict[str, int] = {}

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
                "DROP TABLE IF EXISTS vocab; DROP TABLE IF EXISTS passages; DROP TABLE IF EXISTS docs;"
                "DROP TABLE IF EXISTS meta; DROP TABLE IF EXISTS rows;"
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                "CREATE TABLE docs(path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, sha256 TEXT, passages INTEGER);"
                "CREATE VIRTUAL TABLE passages USING fts5(title, body, path UNINDEXED, pos UNINDEXED,"
                " tokenize='porter unicode61');"
                # which passages a document holds: FTS5 cannot index its UNINDEXED columns
                "CREATE TABLE rows(path TEXT, id INTEGER); CREATE INDEX rows_path ON rows(path);"
                "CREATE VIRTUAL TABLE vocab USING fts5vocab(passages, 'row');")
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
            if old is not None:
                self._drop(rel)
            passages = split_passages(rel, text)
            for p in passages:
                cur = self.db.execute("INSERT INTO passages(title, body, path, pos) VALUES (?, ?, ?, ?)",
                                      (p.title, p.body, p.path, p.pos))
                self.db.execute("INSERT INTO rows VALUES (?, ?)", (rel, cur.lastrowid))
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
        self._df = dict(self.db.execute("SELECT term, doc FROM vocab"))  # stemmed term -> passages holding it
        if st.passages == 0:
            why = f" ({len(st.skipped)} file(s) skipped: {'; '.join(st.skipped[:3])})" if st.skipped else ""
            raise KnowledgeError(f"--knowledge: {self.root} gave no passages: its documents hold no text{why}")
        log.info("knowledge: %d documents, %d passages (%d reused, %d indexed, %d removed) in %.2f s; index %s",
                 st.documents, st.passages, st.reused, st.indexed, st.removed, st.seconds, self.path)
        return st

    def _drop(self, rel: str) -> None:
        self.db.execute("DELETE FROM passages WHERE rowid IN (SELECT id FROM rows WHERE path=?)", (rel,))
        self.db.execute("DELETE FROM rows WHERE path=?", (rel,))
        self.db.execute("DELETE FROM docs WHERE path=?", (rel,))

    def doc_freq(self, word: str) -> int | None:
        """In how many passages `word` is, by its longest prefix that is an indexed (stemmed) term:
        Porter stems are prefixes of their words but for a few endings ("happy" -> "happi"), and a
        frequency is only used to leave out the commonest terms. None for an unknown word."""
        if " " in word:
            return None
        for n in range(len(word), 2, -1):
            df = self._df.get(word[:n])
            if df is not None:
                return df
        return None

    def query(self, text: str) -> str:
        """The MATCH expression for `text`: its terms but the commonest, at most MAX_TERMS of the rarest."""
        terms = query_terms(text)
        n = max(1, self.stats.passages)
        scored = [(self.doc_freq(t), i, t) for i, t in enumerate(terms)]
        common = max(COMMON * n, COMMON_MIN)
        rare = [x for x in scored if x[0] is None or x[0] <= common] or scored
        rare.sort(key=lambda x: (x[0] if x[0] is not None else -1, x[1]))
        return fts_match([t for _, _, t in rare[:MAX_TERMS]])

    def search(self, text: str, k: int = 3) -> list[Hit]:
        """The `k` best passages for `text` (a question, or a partial transcript of one)."""
        q = self.query(text)
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
