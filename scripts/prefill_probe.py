"""Text only: what an LLM answers when its reply is begun for it with the restated opening (restate.py),
and how many tokens come before the answer word. Three ways, on the same server:

- none: the question alone (the reply restates it: "The capital of Peru is Lima.")
- full: the reply begun with the whole opening ("The capital of Peru is")
- short: the reply begun with the short one the front-end says once the LLM answers soon ("It is")

Only questions with a restated opening count. The server must go on from a last assistant message
(llama.cpp's llama-server does; `make setup-llama-server`).

    python scripts/prefill_probe.py --questions ../shared/data/questions-dev.jsonl --out docs/prefill-probe.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from tandem.bench.common import load_questions
from tandem.llm.client import ChatClient, LLMConfig
from tandem.llm.local_server import LocalLlamaServer
from tandem.llm.prompt import answer_messages
from tandem.providers.llm import with_opening
from tandem.think.restate import restate
from tandem.bench.scoring import normalize


def right(reply: str, answers: list[str]) -> bool:
    text = f" {normalize(reply)} "
    return any(f" {normalize(a)} " in text for a in answers)


async def ask(client: ChatClient, question: str, opening: str | None, answers: list[str]) -> dict:
    messages = answer_messages([], question)
    deltas = client.stream(messages + [{"role": "assistant", "content": opening}] if opening else messages,
                           max_tokens=60)
    if opening:
        deltas = with_opening(opening, deltas)
    t0, text, tokens, word = time.perf_counter(), "", 0, None
    async for d in deltas:
        text += d
        tokens += 1
        if word is None and right(text, answers):
            word = {"tokens": tokens, "s": round(time.perf_counter() - t0, 3)}
    return {"reply": text.strip(), "right": right(text, answers), "answer_word": word}


async def probe(url: str, model: str, questions) -> list[dict]:  # noqa: ANN001 - bench.Question
    client = ChatClient(LLMConfig(url=url, model=model, temperature=0.0))
    rows = []
    try:
        for q in questions:
            full = restate(q.question)
            if not full:
                continue
            row = {"question": q.question, "opening": full}
            for way, opening in (("none", None), ("full", full), ("short", restate(q.question, short=True))):
                row[way] = await ask(client, q.question, opening, q.answers)
            rows.append(row)
            print(f"{q.question[:50]:50s} " + " | ".join(f"{w}: {'right' if row[w]['right'] else 'wrong'}"
                                                       for w in ("none", "full", "short")), flush=True)
    finally:
        await client.aclose()
    return rows


def summary(rows: list[dict]) -> dict:
    out = {"questions": len(rows)}
    for way in ("none", "full", "short"):
        words = [r[way]["answer_word"] for r in rows if r[way]["answer_word"]]
        out[way] = {"right": sum(r[way]["right"] for r in rows),
                    "tokens_to_answer_word_median": statistics.median(w["tokens"] for w in words) if words else None,
                    "s_to_answer_word_median": statistics.median(w["s"] for w in words) if words else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--llm-url", default=None, help="a server that continues a reply (default: the embedded "
                                                    "llama-server, two slots)")
    ap.add_argument("--llm-model", default="default")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    questions = load_questions(args.questions, None)
    if args.llm_url:
        rows = asyncio.run(probe(args.llm_url, args.llm_model, questions))
    else:
        with LocalLlamaServer(parallel=2) as srv:
            rows = asyncio.run(probe(srv.url, srv.model, questions))
    result = {"summary": summary(rows), "rows": rows}
    print(json.dumps(result["summary"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
