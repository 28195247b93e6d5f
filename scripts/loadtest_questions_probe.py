"""Text only: does the embedded LLM answer `tandem loadtest`'s built-in questions in every order the
sessions ask them? Session i asks questions i, i+1, ... (tandem/server/loadtest.py), so each question is
asked as a first turn and after every other; each is asked here as the tandem asks it (the chat prompt
with the history so far, the reply begun with the restated opening) and judged by its accepted answers.
Capacity measures load: a question the LLM gets wrong with no load at all measures what it knows, and
made one session of every sweep above two fail (the largest planet, as a first turn: "Neptune").

    python scripts/loadtest_questions_probe.py            # exits 1 when any turn is wrong
"""
from __future__ import annotations

import asyncio
import sys

from tandem.frontends.compact.replay import said_answer
from tandem.llm.client import ChatClient, LLMConfig
from tandem.llm.local_server import LocalLlamaServer
from tandem.llm.prompt import answer_messages
from tandem.providers.llm import with_opening
from tandem.think.restate import restate
from tandem.server.loadtest import DEFAULT_QA

TURNS = 8  # about what one session of a 45 s loadtest asks


async def reply(client: ChatClient, turns: list[tuple[str, str]], question: str) -> str:
    messages = answer_messages(turns, question)
    opening = restate(question)
    deltas = client.stream(messages + [{"role": "assistant", "content": opening}] if opening else messages)
    if opening:
        deltas = with_opening(opening, deltas)
    return "".join([d async for d in deltas]).strip()


async def probe(url: str, model: str) -> int:
    client = ChatClient(LLMConfig(url=url, model=model, temperature=0.0))
    wrong = 0
    try:
        for start in range(len(DEFAULT_QA)):
            turns: list[tuple[str, str]] = []
            for k in range(TURNS):
                question, answers = DEFAULT_QA[(start + k) % len(DEFAULT_QA)]
                said = await reply(client, turns, question)
                if not said_answer(said, answers):
                    wrong += 1
                    print(f"session {start} turn {k}: {question!r} -> {said!r}", flush=True)
                turns += [("user", question), ("assistant", said)]
    finally:
        await client.aclose()
    print(f"{wrong} of {len(DEFAULT_QA) * TURNS} turns wrong")
    return wrong


def main() -> None:
    with LocalLlamaServer() as srv:
        sys.exit(1 if asyncio.run(probe(srv.url, srv.model)) else 0)


if __name__ == "__main__":
    main()
