"""The oracle prompt (KAME, in substance) and the cascade's plain-answer prompt."""
from __future__ import annotations

ORACLE_SYSTEM = (
    "You are the assistant in a spoken conversation that is still going on. The user may not have "
    "finished speaking: predict what they are asking and give the assistant's next reply. Be confident "
    "and direct. Answer in at most 30 words. If the assistant said something wrong, correct it. Use "
    "only words that can be spoken aloud: no symbols, lists or markup."
)

CASCADE_SYSTEM = (
    "You are a helpful voice assistant. Answer the user's question directly and confidently in one "
    "or two short sentences, at most 30 words. Use only words that can be spoken aloud: no symbols, "
    "lists or markup."
)


def dialogue_text(turns: list[tuple[str, str]], partial: str = "") -> str:
    lines = [f"{role}: {text}" for role, text in turns if text.strip()]
    if partial.strip():
        lines.append(f"user: {partial.strip()}")
    return "\n".join(lines)


def oracle_messages(turns: list[tuple[str, str]], partial: str = "") -> list[dict[str, str]]:
    return [{"role": "system", "content": ORACLE_SYSTEM},
            {"role": "user", "content": dialogue_text(turns, partial)}]


def cascade_messages(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": CASCADE_SYSTEM}]
    for role, text in turns:
        if text.strip():
            msgs.append({"role": "user" if role == "user" else "assistant", "content": text})
    return msgs
