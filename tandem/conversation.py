"""What has been said so far, as the back-end sees it: committed user finals, the current partial,
and what the assistant has actually spoken (not what it was told)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .listener.worker import word_count


@dataclass
class Conversation:
    turns: list[tuple[str, str]] = field(default_factory=list)  # ("user" | "assistant", text)
    partial: str = ""

    def _append(self, role: str, text: str) -> None:
        if self.turns and self.turns[-1][0] == role:
            self.turns[-1] = (role, (self.turns[-1][1] + " " + text).strip())
        else:
            self.turns.append((role, text.strip()))

    def on_partial(self, text: str) -> None:
        self.partial = text

    def on_final(self, text: str) -> None:
        self.partial = ""
        if text.strip():
            self._append("user", text)

    def on_assistant(self, text: str) -> None:
        if text.strip():
            self._append("assistant", text)

    def current_user_text(self) -> str:
        """The user's current turn: its finals plus the live partial."""
        committed = self.turns[-1][1] if self.turns and self.turns[-1][0] == "user" else ""
        return (committed + " " + self.partial).strip()

    def current_user_words(self) -> int:
        return word_count(self.current_user_text())
