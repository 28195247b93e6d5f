"""The embedded LLM's engines side by side on this machine: llama-cpp-python's server (one request at a
time) and llama.cpp's own llama-server (parallel slots, continuous batching; `make setup-llama-server`),
with 1 and 2 threads. Measured per engine, one after the other in one run:

- prompt switch: time to the first token when a prompt does not begin as the previous one did (a
  different system prompt), against one that extends it (what a server keeping the last prompt's
  state saves);
- throughput: 8 answers of up to 60 tokens, one at a time and 4 at once (chunks per second, and
  the first-token time's median).

    python scripts/llm_engine_bench.py --out docs/llm-engine-bench.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from tandem.llm.build_server import find
from tandem.llm.client import ChatClient, LLMConfig
from tandem.llm.local_server import LocalLlamaServer
from tandem.llm.prompt import answer_messages, oracle_messages


async def first_token(c: ChatClient, msgs: list[dict[str, str]], max_tokens: int = 20) -> tuple[float, int, float]:
    t0 = time.perf_counter()
    first, n = None, 0
    async for _ in c.stream(msgs, max_tokens=max_tokens):
        first = first if first is not None else time.perf_counter() - t0
        n += 1
    return first or 0.0, n, time.perf_counter() - t0


async def measure(url: str, model: str, parallel: int) -> dict:
    c = ChatClient(LLMConfig(url=url, model=model))
    try:
        chat = answer_messages([], "What is the capital of Spain?")
        lines = oracle_messages([], "What is the capital of Spain?")
        switch, extend = [], []
        for _ in range(3):
            switch.append((await first_token(c, lines))[0])  # the other form: another system prompt
            switch.append((await first_token(c, chat))[0])
            extend.append((await first_token(c, answer_messages([], "What is the capital of Italy?")))[0])
        out = {"ttft_prompt_switch_s": round(statistics.median(switch), 3),
               "ttft_prompt_extends_s": round(statistics.median(extend), 3)}
        qs = [answer_messages([], f"Tell me about the history of city number {i}.") for i in range(8)]
        for conc in [1] + ([parallel] if parallel > 1 else []):
            t0 = time.perf_counter()
            res = []
            for k in range(0, len(qs), conc):
                res += await asyncio.gather(*(first_token(c, q, 60) for q in qs[k:k + conc]))
            wall = time.perf_counter() - t0
            out[f"concurrency_{conc}"] = {"chunks_per_s": round(sum(r[1] for r in res) / wall, 1),
                                          "ttft_median_s": round(statistics.median(r[0] for r in res), 3)}
        return out
    finally:
        await c.aclose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    engines = [("llama-cpp-python", 1, 1), ("llama-cpp-python", 2, 1)]
    if find() is not None:
        engines += [("llama-server", 1, 4), ("llama-server", 2, 4)]
    else:
        print("no llama-server in this environment (make setup-llama-server): measuring llama-cpp-python only")
    rows = []
    for name, threads, parallel in engines:
        with LocalLlamaServer(threads=threads, parallel=parallel) as srv:
            r = {"engine": name, "threads": threads, "parallel": parallel, **asyncio.run(measure(srv.url, srv.model, parallel))}
        print(json.dumps(r))
        rows.append(r)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
