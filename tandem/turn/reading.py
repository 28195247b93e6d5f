"""What the user's words at a pause tell the turn machine, read after each transcript's own row.

Two readings, the second only where the first finds nothing:
- the words (turn/unfinished.py): all the user has said so far stops inside a clause -> UNFINISHED, the
  floor stays theirs until they go on or the long hold's limit passes;
- the embedded LLM (llm/turn_end.py), for a transcript of the pause itself (a paused partial or a final)
  whose words read whole and end with a sentence's mark, heard while the user's voice is quiet: the chance that their message ends there
  under UNSURE_END -> MAY_GO_ON, a listener's pause (a story's sentence, "Can you tell me?"); over it, in
  that pause -> END_LIKELY. Its answer comes 20-100 ms after the transcript; one that a newer transcript
  (or the user's voice) overtook is dropped. Over SURE_END the words are marked as the message's end
  (`TurnMachine.words_end`): the front-end takes a settled turn at the first quiet frame.
A final Whisper left without its mark is closed as the sentence the endpoint ended (telling.closed) before it
is judged; its words are read for a clause's hold as written.
The front-end model may have begun a reply on the silence before either reading: the machine withdraws it
while it is not yet audible (Action.WITHDRAW). Before them, on every transcript: all the user said since the
last reply is a telling (turn/telling.py) -> TELLING, the floor theirs through the pauses until a reading
ends it (the judge's chance over TELLING_END) or its hold's limit passes; a question ends it -> ASKING.
"""
from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from ..llm.local_server import MODEL_ALIAS
from ..llm.turn_end import TurnEndJudge
from .machine import ASKING, END_LIKELY, HOLD_EXPIRED, MAY_GO_ON, TELLING, UNFINISHED, State, Transition, TurnMachine
from .telling import asks, closed, tells_at_length
from .unfinished import reads_unfinished

if TYPE_CHECKING:
    from .session_config import SessionConfig

log = logging.getLogger(__name__)

# under this chance of the message ending, the user may go on: under a third of the least a whole dev question got
# (0.34); under it (scripts/turn_end_probe.py): 9 of 12 dev pause fragments as Whisper ends them ("Can you tell
# me?"), 32 of 40 dev story sentences, 4 of 136 whole dev turns, and 5 of 6 greetings, thanks and commands
UNSURE_END = 0.1
# after a telling (turn/telling.py) the message ends only over this chance: over what most story sentences get (35 of
# 40 under 0.2) and under the least a whole dev question got (0.34); in between, a breath ("Mm-hmm.")
TELLING_END = 0.3
# over this chance the words end the message (`TurnMachine.words_end`): under the least a whole dev question got
# (0.34); 9 of 12 dev pause fragments under 0.1
SURE_END = 0.3
JUDGED_FROM = (State.USER_SPEAKING, State.USER_PAUSING, State.TURN_ENDED, State.USER_TELLING)
TELLS_FROM = (State.USER_SPEAKING, State.USER_PAUSING, State.TURN_ENDED)
# only words Whisper ended as a sentence are judged: without the mark the chance of the end-of-message token is
# low for whole questions too ("Never mind that which planet has the big rings", a partial at a pause)
ENDS_SENTENCE = re.compile(r"[.?!]\s*$")


class EndJudge(Protocol):
    async def p_end(self, text: str) -> float | None: ...


@dataclass
class TurnReader:
    machine: TurnMachine
    hold_unfinished: bool = True  # False: silence alone decides (SessionConfig.hold_unfinished)
    judge: EndJudge | None = None  # None: the words alone
    voice_quiet: Callable[[], bool] = lambda: True  # the user's voice is quiet now (the session's meter)
    on_judged: Callable[[str, float | None], None] = lambda text, p: None  # each answer (the timeline's)
    # the user's words since the assistant's last reply (Conversation.told_since_reply); None: no telling's hold
    told: Callable[[], str] | None = None
    _read = 0  # transcripts read: a judgement of an older one is dropped
    _tasks: set[asyncio.Task] = field(default_factory=set)

    def read(self, text: str, *, final: bool, paused: bool, said_more: bool, t: float | None = None) -> Transition | None:
        """One transcript, after the machine took its PARTIAL or FINAL: the move its words make, if any (the
        judge's comes later, from its own task)."""
        self._read += 1
        self.machine.words_end = False  # these words are not read yet
        # the endpoint ends a sentence Whisper may have left without its mark: a telling and the judge read the
        # sentence, closed; the clause's hold reads its words as they are
        sentence = closed(text) if final else text
        if self.told is not None:
            self._tell(sentence, said_more, t)
        if said_more:
            return None
        if self.hold_unfinished and reads_unfinished(text):
            return self.machine.on(UNFINISHED, t)
        text = sentence
        if (self.judge is not None and (final or paused) and ENDS_SENTENCE.search(text) and self.voice_quiet()
                and (self.machine.state in JUDGED_FROM or self.machine.state is State.USER_MAY_GO_ON)):
            task = asyncio.get_running_loop().create_task(self._judge(text, self._read))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return None

    async def _judge(self, text: str, read: int) -> Transition | None:
        p = await self.judge.p_end(text)  # type: ignore[union-attr]
        self.on_judged(text, p)
        if read == self._read:
            self.machine.words_end = p is not None and p >= SURE_END
        if p is None or read != self._read or not self.voice_quiet():
            return None  # no answer, or the user has said (or begun to say) more since
        telling = self.told is not None and tells_at_length(self.told())
        ends = p >= (TELLING_END if telling else UNSURE_END)
        if self.machine.state is State.USER_TELLING:
            return self.machine.on(END_LIKELY if ends else MAY_GO_ON)
        if p < UNSURE_END and self.machine.state in JUDGED_FROM:
            return self.machine.on(MAY_GO_ON)
        if ends and self.machine.state is State.USER_MAY_GO_ON:
            return self.machine.on(END_LIKELY)
        return None

    def _tell(self, text: str, said_more: bool, t: float | None) -> Transition | None:
        """A telling holds the floor from before its pause (TELLING); a question ends it (ASKING). Where the voice
        went on past the transcript, its last mark is where the audio was cut, and ends no sentence."""
        state = self.machine.state
        if state is State.USER_TELLING and asks(text) and not said_more:
            return self.machine.on(ASKING, t)
        if state in TELLS_FROM and not self._telling_ended() and tells_at_length(self.told(), cut=said_more):  # type: ignore[misc]
            return self.machine.on(TELLING, t)
        return None

    def _telling_ended(self) -> bool:
        """The assistant's turn came from a reading or a hold's limit: the telling is over, and the Listener's last
        transcripts of it must not take back the reply they let begin."""
        entered = next((m for m in reversed(self.machine.history) if m.before is not m.after), None)
        return entered is not None and entered.after is State.TURN_ENDED and entered.event in (END_LIKELY, HOLD_EXPIRED)

    @classmethod
    def of_session(cls, machine: TurnMachine, config: "SessionConfig", client: object, voice_quiet: Callable[[], bool],
                   on_judged: Callable[[str, float | None], None], told: Callable[[], str] | None = None) -> "TurnReader":
        """A session's reader: the words' hold as configured, the judge in tandem mode with the embedded LLM (the
        cascade's reply waits for no front-end: its floor is the words')."""
        judge = turn_end_judge(client, config.judge_turn_end and config.mode == "tandem")
        return cls(machine, config.hold_unfinished, judge, voice_quiet, on_judged, told if config.hold_telling else None)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if isinstance(self.judge, TurnEndJudge):
            await self.judge.close()


def turn_end_judge(client: object, judge: bool) -> TurnEndJudge | None:
    """The embedded LLM's turn-end judge for a session whose LLM client is the embedded model's (its chat
    template and end token are the judge's); None for another LLM, or with the judge turned off."""
    config = getattr(client, "config", None)
    if not judge or config is None or getattr(config, "model", None) != MODEL_ALIAS:
        return None
    return TurnEndJudge(config.url)
