"""What retrieval costs on this machine: index build time and size, and query time, for synthetic
corpora of 1k, 10k and 100k passages (documents of made-up sentences over a real English lexicon,
with Zipf-like word frequencies, as text has). Queries are question-like: four or five words of one
passage plus words a spoken question adds. Each query runs on the knowledge base's own thread, as a
session's do; the time is measured from the event loop (the thread hop included).

    python scripts/knowledge_cost.py --sizes 1000,10000,100000 --out docs/knowledge-cost.json
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from tandem.frontends.compact.lexicon import english_words
from tandem.knowledge import KnowledgeBase
from tandem.knowledge.index import KnowledgeIndex

PASSAGES_PER_FILE = 20
ASKING = ["what is the", "how many", "how long does the", "where is the", "who made the", "can you tell me about"]


def make_corpus(root: Path, passages: int, rng: random.Random) -> list[list[str]]:
    lex = [w.lower() for w in english_words() if 3 <= len(w) <= 12] or [f"word{i}" for i in range(20000)]
    rng.shuffle(lex)
    vocab = lex[:20000]
    cum = list(itertools.accumulate(1.0 / (i + 10) for i in range(len(vocab))))  # Zipf-like: a few words everywhere, most rare
    kept: list[list[str]] = []
    n_files = (passages + PASSAGES_PER_FILE - 1) // PASSAGES_PER_FILE
    for f in tqdm(range(n_files), desc=f"corpus {passages}", unit="file", leave=False):
        lines = [f"# Document {f}", ""]
        for s in range(min(PASSAGES_PER_FILE, passages - f * PASSAGES_PER_FILE)):
            words = rng.choices(vocab, cum_weights=cum, k=60)
            lines += [f"## Section {s} {' '.join(words[:2])}", " ".join(words) + ".", ""]
            if len(kept) < 2000:
                kept.append(words)
        (root / f"doc{f:05d}.md").write_text("\n".join(lines))
    return kept


async def query_times(kb: KnowledgeBase, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        await kb.search(q)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def measure(passages: int, n_queries: int, seed: int) -> dict:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "docs"
        root.mkdir()
        kept = make_corpus(root, passages, rng)
        index_path = Path(tmp) / "index.sqlite"
        t0 = time.perf_counter()
        idx = KnowledgeIndex.open(root, index_path, progress=True)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        KnowledgeIndex.open(root, index_path, progress=False).close()  # nothing changed: reused
        reuse_s = time.perf_counter() - t0
        sources = [rng.choice(kept) for _ in range(n_queries)]
        queries = [f"{rng.choice(ASKING)} {' '.join(rng.sample(words, rng.randint(4, 5)))}" for words in sources]
        kb = KnowledgeBase(idx, passages=1)
        times = asyncio.run(query_times(kb, queries))
        # the passage the query's words were taken from, among the 3 best (what a prompt would get)
        found = sum(1 for q, words in zip(queries[:200], sources) if any(
            h.passage.body.startswith(" ".join(words[:8])) for h in kb.search_now(q, 3)))
        kb.close()
        return {"passages": idx.stats.passages, "files": idx.stats.documents, "build_s": round(build_s, 2),
                "reopen_unchanged_s": round(reuse_s, 3), "index_mb": round(index_path.stat().st_size / 1e6, 2),
                "queries": len(times), "query_p50_ms": round(statistics.median(times), 2),
                "query_p95_ms": round(pct(times, 95), 2), "query_max_ms": round(max(times), 2),
                "source_in_top3_of_200": found}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = [measure(int(s), args.queries, args.seed) for s in args.sizes.split(",")]
    print("| passages | files | build | reopen, unchanged | index size | query p50 | query p95 | max | source in top 3 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['passages']} | {r['files']} | {r['build_s']} s | {r['reopen_unchanged_s']} s | {r['index_mb']} MB | "
              f"{r['query_p50_ms']} ms | {r['query_p95_ms']} ms | {r['query_max_ms']} ms | "
              f"{r['source_in_top3_of_200'] / 2:.0f}% |")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "seed": args.seed}, indent=1))


if __name__ == "__main__":
    main()
