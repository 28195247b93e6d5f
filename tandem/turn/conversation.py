"""What has been said so far, as the back-end sees it: committed user finals, the current partial,
and what the assistant has actually spoken (not what it was told)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..think.followup import current_question
from .backchannel import is_backchannel
from .telling import closed
from ..listener.worker import word_count

# a reply the user cut short after this many of its words were heard was a reply under way, not a false start
# they talked over: what they say next is a new message ("Sorry, a different question."), not the next sentence
# of a telling begun before it (FDB dev: a request for tennis's rules and that apology were held as a story)
REPLY_HEARD_WORDS = 4


@dataclass
class Conversation:
    turns: list[tuple[str, str]] = field(default_factory=list)  # ("user" | "assistant", text)
    partial: str = ""
    # ask the LLM each turn as it stands alone (`standalone_question`); False: as heard (a bench variant)
    standalone: bool = True
    _turn_at: int | None = field(default=None, repr=False)  # where the user's turn began, while only partials
    # the assistant turns the user cut short (`unsay`): a false start, not a reply the user let finish
    _cut: set[int] = field(default_factory=set, repr=False)

    def _append(self, role: str, text: str) -> None:
        if self.turns and self.turns[-1][0] == role:
            self.turns[-1] = (role, (self.turns[-1][1] + " " + text).strip())
            self._cut.discard(len(self.turns) - 1)  # it holds more than the cut reply now
        else:
            self.turns.append((role, text.strip()))

    def on_partial(self, text: str) -> None:
        if text.strip() and self._turn_at is None:
            self._turn_at = len(self.turns)
        self.partial = text

    def on_final(self, text: str) -> None:
        self.partial = ""
        at, self._turn_at = self._turn_at, None
        if not text.strip():
            return
        if at is not None and at < len(self.turns):
            # the assistant began its reply (tandem mode) before this final arrived: the user's turn
            # goes before it, as it was spoken, or the history would end on the user's question
            # and show the reply's first words before it
            if at > 0 and self.turns[at - 1][0] == "user":
                self.turns[at - 1] = ("user", (self.turns[at - 1][1] + " " + text).strip())
            else:
                self.turns.insert(at, ("user", text.strip()))
                self._cut = {i + (i >= at) for i in self._cut}
        else:
            self._append("user", text)

    def on_assistant(self, text: str) -> None:
        if not text.strip():
            return
        text = " ".join(text.split())  # one spacing, so `unsay` finds the piece
        if self._turn_at is not None and self._turn_at == len(self.turns) and self.turns \
                and self.turns[-1][0] == "assistant":
            self.turns.append(("assistant", text))  # a new reply, begun before the user's final: not the last one's tail
        else:
            self._append("assistant", text)

    def unsay(self, text: str, heard: float) -> str:
        """The assistant's voice was cut after `heard` (0..1) of the piece `text`: keep only the words
        heard in full (a share of the words as large as the share of audio played, rounded down, so
        a word cut half-way counts as unsaid) in the last assistant turn. Returns what was removed."""
        i = next((j for j in range(len(self.turns) - 1, -1, -1) if self.turns[j][0] == "assistant"), None)
        piece = " ".join(text.split())
        turn = self.turns[i][1] if i is not None else ""
        if not piece or not turn.endswith(piece) or turn[: len(turn) - len(piece)][-1:] not in ("", " "):
            return ""
        words = piece.split()
        keep = words[: int(len(words) * max(0.0, min(1.0, heard)))]
        said = (turn[: len(turn) - len(piece)] + " ".join(keep)).strip()
        if said:
            self.turns[i] = ("assistant", said)
            self._cut.add(i)
        else:
            del self.turns[i]
            self._cut = {j - (j > i) for j in self._cut if j != i}
            if self._turn_at is not None and i < self._turn_at:
                self._turn_at -= 1  # the user's turn still begins after what is left
        return " ".join(words[len(keep):])

    @property
    def hearing(self) -> bool:
        """A user turn is being heard: it has partials and no final yet."""
        return self._turn_at is not None

    def _reply_begins(self) -> int | None:
        """Where the assistant's reply to the user's current turn begins in `turns`, once it has begun:
        tandem mode often speaks before the final exists, or in a pause before the user goes on."""
        if self._turn_at is not None:
            return self._turn_at if self._turn_at < len(self.turns) else None
        last_user = max((i for i, (role, _) in enumerate(self.turns) if role == "user"), default=None)
        if last_user is None or last_user + 1 >= len(self.turns):
            return None
        return last_user + 1

    def reply_under_way(self) -> bool:
        return self._reply_begins() is not None

    def told_since_reply(self) -> str:
        """What the user has said since the assistant's last reply (a backchannel of its own is none, nor a false
        start the user cut short and went on over), the live partial too: a telling's words (turn/telling.py)."""
        told: list[str] = []
        for i in range(len(self.turns) - 1, -1, -1):
            role, text = self.turns[i]
            if role == "assistant" and not is_backchannel(text) and (
                    i not in self._cut or word_count(text) >= REPLY_HEARD_WORDS):
                break
            if role == "user":
                told.append(closed(text))
        return " ".join(told[::-1] + [self.partial]).strip()

    def reply_said(self) -> str:
        """What the assistant has said of its reply to the user's current turn ('' before it begins)."""
        i = self._reply_begins()
        return "" if i is None else " ".join(t for role, t in self.turns[i:] if role == "assistant")

    def without_reply_under_way(self) -> list[tuple[str, str]]:
        """The turns without the assistant's reply to the user's current turn, where that reply has
        begun: what to ask an LLM for that reply with. Shown its first words as a finished assistant
        message, a small LLM answers around them ("The tallest" -> "The tallest is Mount Everest, but
        I'm sure you meant it differently."); in a follow-up the first word of the new reply would
        read as the tail of the last one. (A reply begun after a final that the user then goes on
        from belongs to that final's turn, and stays.)"""
        i = self._reply_begins()
        return self.turns if i is None else self.turns[:i]

    def current_user_text(self) -> str:
        """The user's current turn: its finals plus the live partial. With no partial, the last turn
        the user finished, even when the assistant's reply to it already began (in tandem mode the
        reply often starts before the final transcript exists)."""
        if self.turns and self.turns[-1][0] == "user":
            return (self.turns[-1][1] + " " + self.partial).strip()
        if self.partial.strip() or self._turn_at is not None:
            return self.partial.strip()
        return next((t for role, t in reversed(self.turns) if role == "user"), "")

    def earlier_user_turns(self) -> list[str]:
        """What the user said before their current turn (`current_user_text`), one entry a turn."""
        users = [t for role, t in self.turns if role == "user"]
        current_in_turns = (self.turns and self.turns[-1][0] == "user") or not (
            self.partial.strip() or self._turn_at is not None)
        return users[:-1] if current_in_turns and users else users

    def user_said(self, chars: int = 300) -> str:
        """The user's turns so far as one text, the latest `chars` characters: what the Listener's Whisper
        is told was said before the audio it decodes next."""
        text = " ".join(t for role, t in self.turns if role == "user" and t.strip())
        return text[-chars:].split(" ", 1)[-1] if len(text) > chars else text

    def standalone_question(self) -> str:
        """The user's current turn as a question that stands on its own: a follow-up fragment ("And in
        Mexico?") rewritten from the question before it (tandem/think/followup.py); '' when it needs no
        rewriting."""
        if not self.standalone:
            return ""
        return current_question(self.earlier_user_turns(), self.current_user_text(),
                                heard_whole=not self.partial.strip()) or ""

    def asking(self) -> str:
        """What the user asks now, in words that need no earlier turn (`standalone_question`, else the turn)."""
        return self.standalone_question() or self.current_user_text()

    def current_user_words(self) -> int:
        return word_count(self.current_user_text())
