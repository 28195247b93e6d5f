"""Text only: how well does an LLM answer follow-ups ("And of Australia?") and single questions under
each oracle prompt form? No audio, no front-end: the prompt forms are compared on the same LLM, the
first answer being what the cascade prompt gets from it (as a session's history would hold).

    python scripts/followup_prompt_probe.py --dialogues ../shared/data/dialogues-dev.jsonl \
        --dialogues examples/dialogues-followup.jsonl --dialogues examples/dialogues-interrupt.jsonl \
        --dialogues examples/dialogues-talkover.jsonl \
        --questions ../shared/data/questions-dev.jsonl --stride 3 [--llm-url URL --llm-model NAME]
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from tandem.bench.common import load_questions
from tandem.bench.dialogues import load_dialogues
from tandem.llm.client import ChatClient, LLMConfig
from tandem.llm.local_server import LocalLlamaServer
from tandem.think.followup import current_question
from tandem.llm.prompt import answer_messages, oracle_messages
from tandem.bench.scoring import normalize

# the plain question-answering prompt the cascade had before both modes shared one (kept here to compare)
FORMER_CASCADE_SYSTEM = (
    "You are a helpful voice assistant. Answer the user's question directly and confidently in one "
    "or two short sentences, at most 30 words. Use only words that can be spoken aloud: no symbols, "
    "lists or markup."
)


def cascade_messages(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"role": "system", "content": FORMER_CASCADE_SYSTEM}] + [
        {"role": "user" if r == "user" else "assistant", "content": t} for r, t in turns if t.strip()]


def resolved_messages(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    """The shared prompt with the last turn asked as it stands alone (tandem/think/followup.py): a follow-up
    fragment resolved, or the turn without its lead-in."""
    users = [t for r, t in turns if r == "user"]
    return answer_messages(turns, asked=current_question(users[:-1], users[-1]) or "")


FORMS = {
    "oracle (lines)": lambda turns: oracle_messages(turns),
    "oracle (chat)": lambda turns: oracle_messages(turns, chat=True),
    "shared (chat, both modes)": lambda turns: answer_messages(turns),
    "shared, asked as it stands alone (both modes)": resolved_messages,
    "former cascade": cascade_messages,
}


async def ask(client: ChatClient, messages: list[dict[str, str]]) -> str:
    return "".join([d async for d in client.stream(messages, max_tokens=60)]).strip()


def right(reply: str, answers: list[str]) -> bool:
    text = f" {normalize(reply)} "
    return any(f" {normalize(a)} " in text for a in answers)


async def probe(client: ChatClient, dialogues, questions) -> dict:
    out: dict = {"followups": {f: 0 for f in FORMS}, "questions": {f: 0 for f in FORMS}, "rows": []}
    for d in dialogues:
        if d.kind != "followup":
            continue
        first = d.turns[0].say
        a1 = await ask(client, cascade_messages([("user", first)]))
        turns = [("user", first), ("assistant", a1), ("user", d.turns[-1].say)]
        for name, form in FORMS.items():
            reply = await ask(client, form(turns))
            ok = right(reply, d.turns[-1].answers)
            out["followups"][name] += ok
            out["rows"].append({"id": d.id, "form": name, "reply": reply, "right": ok})
    # interruptions: the first reply cut after a few words (as a barge-in leaves it in the history),
    # then the interrupting turn as heard and as it stands alone
    cuts = (3, 5, 9)
    out["interruptions"] = {f"cut after {n} words, {how}": 0 for n in cuts for how in ("as heard", "standalone")}
    for d in dialogues:
        if d.kind != "interrupt":
            continue
        first = d.turns[0].say
        a1 = await ask(client, cascade_messages([("user", first)]))
        for n in cuts:
            turns = [("user", first), ("assistant", " ".join(a1.split()[:n])), ("user", d.turns[-1].say)]
            for how, messages in (("as heard", answer_messages(turns)), ("standalone", resolved_messages(turns))):
                reply = await ask(client, messages)
                ok = right(reply, d.turns[-1].answers)
                out["interruptions"][f"cut after {n} words, {how}"] += ok
                out["rows"].append({"id": d.id, "form": f"cut {n}, {how}", "reply": reply, "right": ok})
    out["n_interruptions"] = sum(d.kind == "interrupt" for d in dialogues)
    for q in questions:
        for name, form in FORMS.items():
            reply = await ask(client, form([("user", q.question)]))
            out["questions"][name] += right(reply, q.answers)
    out["n_followups"] = sum(d.kind == "followup" for d in dialogues)
    out["n_questions"] = len(questions)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dialogues", type=Path, required=True, action="append", help="may be given more than once")
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--stride", type=int, default=3)
    ap.add_argument("--llm-url")
    ap.add_argument("--llm-model", default="default")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dialogues = [d for path in args.dialogues for d in load_dialogues(path)]
    questions = load_questions(args.questions, None, args.stride)

    async def go(url: str, model: str) -> dict:
        client = ChatClient(LLMConfig(url=url, model=model, temperature=0.0))
        try:
            return await probe(client, dialogues, questions)
        finally:
            await client.aclose()

    if args.llm_url:
        res = asyncio.run(go(args.llm_url, args.llm_model))
    else:
        with LocalLlamaServer() as srv:
            res = asyncio.run(go(srv.url, srv.model))
    text = json.dumps(res, indent=1)
    if args.out:
        args.out.write_text(text)
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()
