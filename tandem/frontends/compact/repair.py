"""A newer oracle that contradicts what the reply has said: "sorry," and the newer one, as the teacher does.

The training teacher (`tandem/train/compact/data.py`, `_Teacher.run`) judges a newer oracle that arrives
mid-answer only on what its stream has fed: once a fed token differs from the token the reply said at
the same place of the older oracle, it finishes the word under way, says "sorry," and reads the newer
oracle from its start; once the newer one has fed past what was said in agreement, it carries on. The
model learned the agreement well and the repair badly: on held-out dialogues most of its inexact copies
were the older oracle's answer said to the end ("It is Ixdraithnior Quousglenshean." with "It is North
Quousglenshean." fed), or its words with the newer one's tail ("Maifipleert is it."). `RepairWatch` makes
the teacher's decision at run time and hands the front-end the repair's tokens to say; what follows
them is the model's own (it was trained to read the newer oracle after them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import takewhile

import torch

from ...speak.frontend import BARGE_IN_FRAMES
from .tokenizer import END, PAD, START

REPAIR = "sorry,"  # what the teacher says before the newer oracle
USER_FLOOR_FRAMES = BARGE_IN_FRAMES  # as many frames of the user's speech as stop the voice
MAX_REPLY_TOKENS = 256  # the reply's tail kept to compare (an oracle is an answer of a sentence or two)


@dataclass
class RepairWatch:
    repair_ids: list[int]  # the tokens of "sorry,"
    stream: list[int] = field(default_factory=list)  # content fed since the oracle stream's last start token
    reply: list[int] = field(default_factory=list)  # the tokens said since the reply began, until the user speaks
    said_from: int | None = None  # where in `reply` the older oracle's words begin, while a newer one is judged
    due: list[int] = field(default_factory=list)  # repair tokens still to say
    repairs: int = 0
    _offered: bool = False  # a repair token was offered this frame
    _user_frames: int = 0  # frames in a row the user has been speaking
    just_repaired: bool = False  # the repair is said and the reply has not gone on yet: no second "sorry,"
    agreed: bool = False  # the newest oracle agrees with all the reply said of the one before (`needless`)

    def fed(self, tok: int, upcoming: tuple[int, ...] | None = None) -> None:
        """The oracle token fed this frame, and what the oracle holds for the frames after it, when it
        is known (a settled oracle: `FrameInput.upcoming`). The newer oracle is judged on both: the
        voice reads a settled answer ahead of the feed (ahead.py), so a repair judged on the feed
        alone came after the voice had said the newer answer ("It is Vien is Canberra. sorry, It is
        Canberra.")."""
        if tok == START:
            self.agreed = False
            found = self._reading(self.stream)
            if found is not None and not self.due:
                self.said_from = found
            self.stream = []
        elif tok > END:
            self.stream.append(tok)
        if tok > END or upcoming:
            # the words it holds beyond the feed, up to the end of this oracle (PADs between them skipped)
            self._judge([t for t in takewhile(lambda t: t > END or t == PAD, upcoming or ()) if t > END])

    def forget(self) -> None:
        """The reply was withdrawn unheard: nothing said so far is to be repaired."""
        self.reply, self.said_from, self.due, self.just_repaired, self.agreed = [], None, [], False, False

    def needless(self, tok: int) -> bool:
        """`tok` begins a "sorry," that nothing calls for: the newer oracle agrees with what was said. The model
        learned that a new oracle under way is repaired, and said "It was invented, sorry, it was invented by
        Thomas Edison." of one that went on from its words."""
        return self.agreed and not self.due and tok == self.repair_ids[0]

    @property
    def pending(self) -> bool:
        """A repair is due and not yet said whole: nothing is read ahead of it."""
        return bool(self.due)

    def no_second_repair(self, logp: torch.Tensor) -> torch.Tensor:
        """`logp` without the repair's first piece right after a repair: the model, which saw the
        difference too, would say its own "sorry," after the one said for it."""
        if not self.just_repaired:
            return logp
        out = logp.clone()
        out[self.repair_ids[0]] = float("-inf")
        return out - torch.logsumexp(out, dim=-1)

    def hears(self, user_speaking: bool) -> None:
        """Whether the user speaks this frame. Once they have for USER_FLOOR_FRAMES in a row they have the
        floor: what comes next answers them and repairs nothing said before. A frame or two is the
        voice-activity tail of the turn just answered, or noise."""
        self._user_frames = self._user_frames + 1 if user_speaking else 0
        if self._user_frames >= USER_FLOOR_FRAMES:
            self.reply, self.said_from, self.due = [], None, []

    def said(self, tok: int, began_reply: bool) -> None:
        """The token the front-end chose this frame. The teacher repairs a reply that has ended too,
        until the user speaks again, so a repair may begin a new stretch of speech."""
        offered, self._offered = self._offered, False
        if offered and (not self.due or tok != self.due[0]):
            self.due = []  # a rule above it (the loop guard, a repeat) said no: the repair is given up
        if tok <= END:
            return
        if self.due and self.due[0] == tok:
            self.due.pop(0)
            self.just_repaired = not self.due
            self.reply.append(tok)
            return
        self.just_repaired = False
        if began_reply:
            self.reply, self.said_from, self.due = [], None, []
        self.reply.append(tok)
        if len(self.reply) > MAX_REPLY_TOKENS:  # a long reply: its oldest tokens go (the watch stays O(1) a frame)
            self.reply = self.reply[-MAX_REPLY_TOKENS:]
            self.said_from = None if self.said_from is None or self.said_from == 0 else self.said_from - 1

    @property
    def under_way(self) -> bool:
        """Part of the repair has been said."""
        return 0 < len(self.due) < len(self.repair_ids)

    def next_token(self) -> int | None:
        """The repair token to say this frame (at a word boundary: the front-end asks only when no
        piece of the word under way is left), or None."""
        self._offered = bool(self.due)
        return self.due[0] if self.due else None

    def _reading(self, stream: list[int]) -> int | None:
        """Where the reply's words began reading `stream` from its start, or None: the reply's tail is
        a prefix of the stream (an opener such as "Hmm," may come before it)."""
        if not stream:
            return None
        first = stream[0]
        for p in range(max(0, len(self.reply) - len(stream)), len(self.reply)):
            if self.reply[p] == first and self.reply[p:] == stream[: len(self.reply) - p]:
                return p
        return None

    def _judge(self, ahead: list[int]) -> None:
        if self.said_from is None:
            return
        said = self.reply[self.said_from:]
        n = len(self.repair_ids)
        if any(said[i: i + n] == self.repair_ids for i in range(len(said) - n + 1)):
            self.said_from = None  # the model repaired by itself
            return
        seen = self.stream + ahead
        clash = next((k for k in range(min(len(seen), len(said))) if seen[k] != said[k]), None)
        if clash is not None:
            # the model may have begun the repair itself a frame before the difference showed ("s" of "sorry")
            begun = next((k for k in range(len(self.repair_ids) - 1, 0, -1)
                          if self.reply[-k:] == self.repair_ids[:k]), 0)
            self.due = list(self.repair_ids[begun:])
            self.said_from = None
            self.repairs += 1
        elif len(seen) > len(said):
            self.said_from = None  # it agrees with all that was said: the reply carries on with it
            self.agreed = True
