"""Reading a settled answer on at the voice's pace rather than the teacher's.

The model paces its words as its training teacher did (`tandem/train/compact/data.py`, S_PER_CHAR):
a word, then PAD frames for about as long as the word takes to say, so that a newer oracle arriving
mid-reply can still take over at the next word. Once the oracle stream carries the answer to the
user's turn as *finally* transcribed (`UserFrame.answer_final`), no newer oracle of that turn is
coming, and that caution only costs time: the words reach the voice one at a time, each voiced alone
(drawn out, with a gap while the voice waits for the next), and the answer word is heard later than
the cascade's, which voices the same sentence whole (docs/BENCHMARKS.md, "Reading a settled answer on").

`ReadOn` lets the front-end read the next oracle word at once when, at a word boundary of a copied
word, the model would only wait (PAD): the decision to go on copying, to stop (END) or to say
something else stays the model's. The text may run ahead of the voice by at most MAX_LEAD_S, so the
voice gets phrases and the model's view of its own reply stays close to what is heard. A word is read
on only when the word after it is fed too, or it ends a sentence: a reply that catches up with the
oracle feed ("The capital of Australia is", the LLM's answer still to come) leaves the model waiting
where it tends to say its last words again ("...Australia is Australia is"), and there it keeps its
own pace.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from .tokenizer import END

if TYPE_CHECKING:
    from .tokenizer import CompactTokenizer

FRAME_S = 0.08
VOICE_S_PER_CHAR = 0.058  # the embedded voice says a whole phrase at about this pace (0.054-0.068 measured)
MAX_LEAD_S = 0.8  # how far the reply's text may run ahead of its voice


@lru_cache(maxsize=4)
def piece_chars(tokenizer: "CompactTokenizer") -> tuple[int, ...]:
    """Characters each piece adds to the said text (a word start counts its space)."""
    return tuple(len(tokenizer.piece(i)) if i > END else 0 for i in range(tokenizer.vocab_size))


@lru_cache(maxsize=4)
def sentence_ends(tokenizer: "CompactTokenizer") -> frozenset[int]:
    """Pieces that end a sentence ("." "?" "!", alone or at a piece's end)."""
    return frozenset(i for i in range(END + 1, tokenizer.vocab_size) if tokenizer.piece(i).rstrip().endswith((".", "?", "!")))


@dataclass
class ReadOn:
    chars: tuple[int, ...]  # `piece_chars` of the tokenizer
    ends: frozenset[int]  # `sentence_ends` of the tokenizer
    reply_chars: int = 0  # characters said since the reply began
    reply_frames: int = 0  # frames since the reply began
    words_read_on: int = 0  # words begun by `ReadOn` rather than by the model (for logs and tests)
    _in_reply: bool = field(default=False, repr=False)

    def lead_s(self) -> float:
        """How far the said text runs ahead of a voice that began with the reply."""
        return self.reply_chars * VOICE_S_PER_CHAR - self.reply_frames * FRAME_S

    def may_read_on(self) -> bool:
        return self._in_reply and self.lead_s() < MAX_LEAD_S

    def said(self, tok: int, began_reply: bool, read_on: bool) -> None:
        """This frame's token; `read_on`: it was the next oracle word read on by this rule."""
        if began_reply:
            self._in_reply, self.reply_chars, self.reply_frames = True, 0, 0
        if not self._in_reply:
            return
        self.reply_frames += 1
        if tok > END:
            self.reply_chars += self.chars[tok] if tok < len(self.chars) else 0
        elif tok == END:
            self._in_reply = False  # the model stopped (for the user, or at its end): nothing to read on
        self.words_read_on += int(read_on)
