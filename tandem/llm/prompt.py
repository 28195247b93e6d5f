"""The one prompt both modes ask the LLM with (KAME's oracle prompt, in substance), so that the
tandem and the cascade differ only in how the answer reaches the user's ears, not in what the LLM
was asked. Passages from the user's documents, when there are any, go into it alike.

Forms: the dialogue as chat messages (the default: what chat-tuned LLMs understand best), KAME's one
user message of "user:"/"assistant:" lines, or "auto" (lines for a first question, chat once the
assistant has spoken). With SmolLM2, text only (scripts/followup_prompt_probe.py, 80 dev questions and
8 follow-ups), chat was right on 55 questions and 5 follow-ups, lines on 57 and 2, the plain
question-answering prompt the cascade had before on 55 and 6: level on questions, chat far ahead on
follow-ups. Chat is the default rather than "auto" for speed: a server that keeps the last prompt's
state (llama-cpp-python's) evaluates a prompt that does not begin as the last one did from scratch,
1.3-1.7 s for 120 tokens on this machine, and "auto" switched forms at every follow-up (and between
sessions in different states); within one form each new turn only appends to the prompt.
"""
from __future__ import annotations

import re
from typing import Sequence

from ..speak.openers import gave_up, without_openers

FORMS = ("chat", "lines", "auto")
DEFAULT_FORM = "chat"

# The turns of the dialogue the LLM is shown: the user's current one and the two exchanges before it.
# A follow-up refers to the last exchange or two; a longer history costs prompt evaluation on every
# request (about 80 tokens/s on this machine for the embedded server, re-evaluated whenever another
# session's request came between: unbounded, a 4-session loadtest's eighth turns waited seconds) and
# fills a small model's context with turns it answers worse for.
HISTORY_TURNS = 5

ORACLE_SYSTEM = (
    "You are the assistant in a spoken conversation that is still going on. The user may not have "
    "finished speaking: predict what they are asking and give the assistant's next reply. Be confident "
    "and direct. Answer in at most 30 words. If the assistant said something wrong, correct it. Use "
    "only words that can be spoken aloud: no symbols, lists or markup."
)

ORACLE_CHAT_SYSTEM = (
    "You are a voice assistant in a spoken conversation that is still going on. The user's last "
    "message may be unfinished: predict what they are asking and answer it. Be confident and direct. "
    "Answer in at most 30 words. If you said something wrong, correct it. Use only words that can be "
    "spoken aloud: no symbols, lists or markup."
)

KNOWLEDGE_INSTRUCTION = (
    "Answer from these facts from the user's documents. If they do not hold the answer, say that "
    "the documents do not say."
)


# A speaker's self-repair: what follows the last one replaces what came before it in the same reply
# (the compact front-end's "sorry," before a newer oracle, frontends/compact/repair.py)
_REPAIRED = re.compile(r"^.*\bsorry\s*,\s*", re.IGNORECASE | re.DOTALL)


def as_repaired(reply: str) -> str:
    """An assistant reply as its last self-repair left it: "It is Neptune. sorry, It is Jupiter." is
    "It is Jupiter.". The history shown to the LLM keeps the answer the user was left with; shown the
    garbles and repairs themselves, a small LLM copies them into its next answers ("It is sorry, The
    human leg has 3 legs.", in a loadtest's fourth turn), and they become the next turn's context."""
    left = _REPAIRED.sub("", reply).strip()
    return left or reply.strip()


def _answered(turns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The assistant's turns as the answers they left (`as_repaired`, the front-end's openers left out:
    `without_openers`); a small LLM shown openers answered with them ("well, well,"). A reply that was
    openers alone ("Well, good question."), or that gave up (a fallback: shown "It is something I am not sure
    of, sorry.", SmolLM2 said it to every later question of a loadtest session), is left out with the
    question it left unanswered. (Joined to the next question instead, the two were asked as one, and the
    LLM answered the first again: "How many legs?" got "It is Jupiter.")"""
    out: list[tuple[str, str]] = []
    for role, text in turns:
        if role == "assistant":
            text = as_repaired(text)
            text = "" if gave_up(text) else without_openers(text)
            # as a sentence: shown a reply whose first word was cut ("written by William Shakespeare."), a small
            # LLM went on in lower case and copied it into the next answers ("the cap is a caped skeleton.")
            text = text[:1].upper() + text[1:]
            if not text:
                if out and out[-1][0] == "user":
                    out.pop()
                continue
        if out and out[-1][0] == role:
            out[-1] = (role, out[-1][1] + " " + text)
        else:
            out.append((role, text))
    return out


def recent_turns(turns: Sequence[tuple[str, str]], partial: str = "",
                 keep: int = HISTORY_TURNS, asked: str = "") -> list[tuple[str, str]]:
    """The last `keep` turns of the dialogue with the live partial as the user's, consecutive lines of
    one speaker merged into one turn, starting with a user turn. `asked`, when given, is the user's
    last turn as a question that stands alone (a follow-up fragment resolved, tandem/think/followup.py): the
    LLM is asked it instead of the fragment, with the history still before it."""
    merged: list[tuple[str, str]] = []
    for role, text in list(turns) + ([("user", partial)] if partial.strip() else []):
        if not text.strip():
            continue
        role = "user" if role == "user" else "assistant"
        if merged and merged[-1][0] == role:  # one message per turn, as chat templates expect
            merged[-1] = (role, merged[-1][1] + " " + text.strip())
        else:
            merged.append((role, text.strip()))
    merged = _answered(merged)
    if asked.strip() and merged and merged[-1][0] == "user":
        merged[-1] = ("user", asked.strip())
    kept = merged[-keep:] if keep > 0 else merged
    while len(kept) > 1 and kept[0][0] != "user":
        kept = kept[1:]
    return kept


def dialogue_text(turns: Sequence[tuple[str, str]], partial: str = "", asked: str = "") -> str:
    return "\n".join(f"{role}: {text}" for role, text in recent_turns(turns, partial, asked=asked))


def with_context(system: str, context: Sequence[str]) -> str:
    if not context:
        return system
    facts = "\n".join(f"- {c.strip()}" for c in context)
    return f"{system}\n\n{KNOWLEDGE_INSTRUCTION}\n{facts}"


def chat_form(form: str, turns: Sequence[tuple[str, str]]) -> bool:
    if form not in FORMS:
        raise ValueError(f"unknown prompt form {form!r}; choose from {', '.join(FORMS)}")
    return form == "chat" or (form == "auto" and any(r == "assistant" for r, _ in turns))


def answer_messages(turns: Sequence[tuple[str, str]], partial: str = "", context: Sequence[str] = (),
                    form: str = DEFAULT_FORM, asked: str = "") -> list[dict[str, str]]:
    """The messages for the dialogue so far plus the live partial (empty once the turn is final).
    With passages, "auto" takes the chat form: with SmolLM2 on the knowledge dev set (25 questions,
    one passage each, text only) chat was right on 21, the lines on 18."""
    if not (chat_form(form, turns) or (form == "auto" and context)):
        return [{"role": "system", "content": with_context(ORACLE_SYSTEM, context)},
                {"role": "user", "content": dialogue_text(turns, partial, asked)}]
    return [{"role": "system", "content": with_context(ORACLE_CHAT_SYSTEM, context)}] + \
        [{"role": role, "content": text} for role, text in recent_turns(turns, partial, asked=asked)]


def oracle_messages(turns: Sequence[tuple[str, str]], partial: str = "", chat: bool = False,
                    context: Sequence[str] = ()) -> list[dict[str, str]]:
    """The prompt in a fixed form (lines, or chat with `chat`)."""
    return answer_messages(turns, partial, context, form="chat" if chat else "lines")


def describe(messages: list[dict[str, str]]) -> dict:
    """The prompt as the timeline records it: the last message, the messages between (chat form), and
    the reply's beginning the LLM is to go on from, if it is given one."""
    prefill = messages[-1]["content"] if len(messages) > 2 and messages[-1]["role"] == "assistant" else None
    if prefill is not None:
        messages = messages[:-1]
    out: dict = {"prompt": messages[-1]["content"]}
    if len(messages) > 2:
        out["history"] = [f'{m["role"]}: {m["content"]}' for m in messages[1:-1]]
    if prefill is not None:
        out["prefill"] = prefill
    return out
