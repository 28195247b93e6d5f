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


ORACLE_CHAT_SYSTEM = (
    "You are a voice assistant in a spoken conversation that is still going on. The user's last "
    "message may be unfinished: predict what they are asking and answer it. Be confident and direct. "
    "Answer in at most 30 words. If you said something wrong, correct it. Use only words that can be "
    "spoken aloud: no symbols, lists or markup."
)


def oracle_messages(turns: list[tuple[str, str]], partial: str = "", chat: bool = False) -> list[dict[str, str]]:
    """KAME's oracle prompt: the dialogue as one user message of "user:"/"assistant:" lines; with
    `chat`, the dialogue as chat messages instead (what chat-tuned LLMs understand best, and the
    cascade's form), the live partial as the last user message."""
    if not chat:
        return [{"role": "system", "content": ORACLE_SYSTEM},
                {"role": "user", "content": dialogue_text(turns, partial)}]
    msgs = [{"role": "system", "content": ORACLE_CHAT_SYSTEM}]
    for role, text in list(turns) + ([("user", partial)] if partial.strip() else []):
        if not text.strip():
            continue
        role = "user" if role == "user" else "assistant"
        if len(msgs) > 1 and msgs[-1]["role"] == role:  # one message per turn, as chat templates expect
            msgs[-1]["content"] += " " + text.strip()
        else:
            msgs.append({"role": role, "content": text.strip()})
    return msgs


def cascade_messages(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": CASCADE_SYSTEM}]
    for role, text in turns:
        if text.strip():
            msgs.append({"role": "user" if role == "user" else "assistant", "content": text})
    return msgs
