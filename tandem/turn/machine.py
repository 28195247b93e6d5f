"""The conversation's turn state in one place: who holds the floor, and every transition between states.

Fed by events as the session sees them (the timeline's kinds: voice activity, partial and final
transcripts, the assistant's audio starting and ending, an oracle arriving) and by its own judge of talk-over
(the voice paused under the user's speech, the burst judged a backchannel or an interruption), it moves
between ten states and names, for each transition, the actions taken there. One table holds every
transition; an event a state has no row for changes nothing, which is itself a decision (a voice-activity
start under the reply is not yet talk-over: the judge's pause, `voice_pause`, is).

The machine takes the floor's actions: the session asks its back-end only where a transcript's row says ASK;
the voice (the front-end's `Mouth`, or the cascade's) pauses, resumes or drops the reply where the judge's
event's row says YIELD, RESUME or DROP, and a DROP tells the oracle scheduler the reply it fed is gone
(`takers`). FEED and SPEAK are the oracle feed's and the front-end model's, recorded here as they happen.
docs/DESIGN.md, "Turns", draws the states and lists each old rule and where it went; `follow` derives the
same states from a recorded timeline's events.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable

from .backchannel import DROP, PAUSE, RESUME, BargeInJudge, Decision


class State(str, Enum):
    IDLE = "idle"  # nobody speaks, nothing is asked
    USER_SPEAKING = "user_speaking"  # the user's voice is active
    USER_PAUSING = "user_pausing"  # the voice stopped, no final yet: the turn may go on
    TURN_ENDED = "turn_ended"  # the user's final came: the assistant's turn, not yet audible
    ASSISTANT_SPEAKING = "assistant_speaking"  # the assistant is audible
    TALKED_OVER = "talked_over"  # the user speaks over the assistant: its voice paused while that is judged
    # the user took the floor from the reply: the dropped reply stays unsaid, and the assistant says nothing
    # (in the interruption's pauses too) until the answer to the interruption is due
    INTERRUPTED = "interrupted"
    # the user's words so far stop inside a clause ("My favourite kind of music is"): a pause, not a turn end
    # (turn/unfinished.py); the floor stays theirs until they go on or the hold's limit passes
    USER_UNFINISHED = "user_unfinished"
    # the user's words read whole, but the embedded LLM reads their message as going on (llm/turn_end.py: "It
    # was much steeper than I expected." in a story, "Can you tell me?"): a listener's pause, shorter than the
    # unfinished clause's; the only sound the assistant makes in it is a backchannel
    USER_MAY_GO_ON = "user_may_go_on"
    # the user tells at length: two statements in a row since the last reply, no question (turn/telling.py); a
    # pause is a breath until its reading (the judge's, or the words') says otherwise, or the hold's limit passes
    USER_TELLING = "user_telling"


class Action(str, Enum):
    ASK = "ask"  # the transcript goes to the back-end, which starts, keeps or restarts an oracle stream
    FEED = "feed"  # an oracle's text goes to the front-end's oracle stream
    SPEAK = "speak"  # the assistant may take the floor
    YIELD = "yield"  # pause the voice: the user is speaking over it
    RESUME = "resume"  # the burst was a backchannel: go on with the reply
    DROP = "drop"  # an interruption: the reply is dropped, the new turn is answered
    # a reply begun on the silence but not yet audible is withdrawn unsaid: the words of the pause, read after
    # it began (the Listener's transcript comes 0.2-0.35 s after the voice stops, the model's first word
    # 0.1-0.2 s), stop inside a clause
    WITHDRAW = "withdraw"


# events, by the timeline's kinds (record/timeline.py)
VAD_START, VAD_END, PARTIAL, FINAL = "vad_start", "vad_end", "partial", "final"
AUDIO_START, AUDIO_END = "assistant_audio_start", "assistant_audio_end"
PAUSED, BACKCHANNEL, INTERRUPTED = "voice_pause", "backchannel", "barge_in"
ORACLE = "oracle_append"
# the front-end's: after an interruption, an answer to it has been fed, or the user has been quiet for the
# longest pause inside a turn (frontends/compact/turn_start.py, MAX_TURN_WAIT_FRAMES)
ANSWER_DUE = "answer_due"
# the session's, after a transcript's row: its words stop inside a clause (turn/unfinished.py)
UNFINISHED = "unfinished"
# the reader's, from the turn-end judge (turn/reading.py): the user's message may go on; the message ends
MAY_GO_ON, END_LIKELY = "may_go_on", "end_likely"
# the reader's, from all the user said since the last reply (turn/telling.py): they tell at length; a question ends it
TELLING, ASKING = "telling", "asking"
# the front-end's: the user has been quiet inside their unfinished clause for the hold's limit
# (frontends/compact/turn_start.py, MAX_UNFINISHED_WAIT_FRAMES)
HOLD_EXPIRED = "hold_expired"
# the judge's decisions, as the machine's events
JUDGED = {PAUSE: PAUSED, RESUME: BACKCHANNEL, DROP: INTERRUPTED}

S, A = State, Action
ANY = None  # a row from every state that has no row of its own for the event
# (state, event) -> (next state, actions). The rows are the whole of the turn logic's shape.
TRANSITIONS: dict[tuple[State | None, str], tuple[State, tuple[Action, ...]]] = {
    (S.IDLE, VAD_START): (S.USER_SPEAKING, ()),
    (S.IDLE, PARTIAL): (S.USER_SPEAKING, (A.ASK,)),  # a partial can come before the voice-activity event
    (S.IDLE, FINAL): (S.TURN_ENDED, (A.ASK, A.SPEAK)),
    (S.IDLE, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),  # the front-end's own words
    (S.IDLE, ORACLE): (S.IDLE, (A.FEED,)),
    (S.USER_SPEAKING, PARTIAL): (S.USER_SPEAKING, (A.ASK,)),  # speculative: the scheduler decides if it is new
    (S.USER_SPEAKING, VAD_END): (S.USER_PAUSING, ()),
    (S.USER_SPEAKING, FINAL): (S.TURN_ENDED, (A.ASK, A.SPEAK)),
    (S.USER_SPEAKING, ORACLE): (S.USER_SPEAKING, (A.FEED,)),
    # taken in the Listener's hangover: the front-end judged the turn over before the Listener's voice activity
    # ended (its vad_end comes 0.3-0.5 s after the speech); talk-over is the judge's pause, not this
    (S.USER_SPEAKING, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),
    (S.USER_PAUSING, VAD_START): (S.USER_SPEAKING, ()),  # a pause inside the turn
    (S.USER_PAUSING, PARTIAL): (S.USER_PAUSING, (A.ASK,)),  # the pause's partial may read as the whole question
    (S.USER_PAUSING, FINAL): (S.TURN_ENDED, (A.ASK, A.SPEAK)),
    (S.USER_PAUSING, ORACLE): (S.USER_PAUSING, (A.FEED,)),
    (S.USER_PAUSING, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),  # taken on the pause, before the final
    (S.TURN_ENDED, ORACLE): (S.TURN_ENDED, (A.FEED,)),
    (S.TURN_ENDED, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),
    (S.TURN_ENDED, VAD_START): (S.USER_SPEAKING, ()),  # the user goes on before the assistant spoke
    (S.TURN_ENDED, PARTIAL): (S.TURN_ENDED, (A.ASK,)),  # the Listener's last partial, after its final
    (S.TURN_ENDED, FINAL): (S.TURN_ENDED, (A.ASK,)),  # a second final of the same turn
    (S.ASSISTANT_SPEAKING, ORACLE): (S.ASSISTANT_SPEAKING, (A.FEED,)),
    (S.ASSISTANT_SPEAKING, AUDIO_END): (S.IDLE, ()),
    # the turn's own transcript, late: the tandem often speaks before the final (and its last partials); the
    # scheduler keeps the stream that answers it or starts one (keep_on_same_final), a backchannel asks nothing
    (S.ASSISTANT_SPEAKING, PARTIAL): (S.ASSISTANT_SPEAKING, (A.ASK,)),
    (S.ASSISTANT_SPEAKING, FINAL): (S.ASSISTANT_SPEAKING, (A.ASK,)),
    # the burst's own transcript: heard by the judge (its words decide), asked of the back-end, which starts
    # nothing on a backchannel while the voice is busy
    (S.TALKED_OVER, PARTIAL): (S.TALKED_OVER, (A.ASK,)),
    (S.TALKED_OVER, FINAL): (S.TALKED_OVER, (A.ASK,)),
    (S.TALKED_OVER, ORACLE): (S.TALKED_OVER, (A.FEED,)),
    (S.TALKED_OVER, AUDIO_END): (S.TALKED_OVER, ()),  # the paused voice is silent: the pause's own silence
    (S.TALKED_OVER, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),  # the voice is audible again: the judge let it go
    # the judge's decisions hold from every state: the voice may be busy (a first word synthesizing, a reply
    # begun in the Listener's hangover) before its audio makes the state ASSISTANT_SPEAKING
    (ANY, PAUSED): (S.TALKED_OVER, (A.YIELD,)),
    (ANY, BACKCHANNEL): (S.ASSISTANT_SPEAKING, (A.RESUME,)),
    (ANY, INTERRUPTED): (S.INTERRUPTED, (A.DROP,)),  # the user holds the floor: their turn is answered
    # what the interruption says is asked as any turn's words; its voice activity and its final leave the floor
    # the user's: what the assistant would say in a pause of the interruption ("Stop, stop. [pause] What
    # is...") would be the dropped answer's, not the new one's
    (S.INTERRUPTED, PARTIAL): (S.INTERRUPTED, (A.ASK,)),
    (S.INTERRUPTED, FINAL): (S.INTERRUPTED, (A.ASK,)),
    (S.INTERRUPTED, ORACLE): (S.INTERRUPTED, (A.FEED,)),
    (S.INTERRUPTED, ANSWER_DUE): (S.TURN_ENDED, (A.SPEAK,)),
    (S.INTERRUPTED, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),  # the answer is audible (the cascade's, or forced)
    # a transcript that stops inside a clause holds the floor for the user, whether the Listener still hears
    # their voice (its vad_end lags the speech), heard it stop, or ended the turn on the silence; a reply begun
    # meanwhile is not audible in these states (AUDIO_START leaves them), and is withdrawn
    (S.USER_SPEAKING, UNFINISHED): (S.USER_UNFINISHED, (A.WITHDRAW,)),
    (S.USER_PAUSING, UNFINISHED): (S.USER_UNFINISHED, (A.WITHDRAW,)),
    (S.TURN_ENDED, UNFINISHED): (S.USER_UNFINISHED, (A.WITHDRAW,)),
    # their next words are read afresh (the session sends UNFINISHED again if they still stop inside a clause)
    (S.USER_UNFINISHED, VAD_START): (S.USER_SPEAKING, ()),
    (S.USER_UNFINISHED, PARTIAL): (S.USER_SPEAKING, (A.ASK,)),
    (S.USER_UNFINISHED, FINAL): (S.TURN_ENDED, (A.ASK, A.SPEAK)),
    (S.USER_UNFINISHED, ORACLE): (S.USER_UNFINISHED, (A.FEED,)),
    (S.USER_UNFINISHED, HOLD_EXPIRED): (S.TURN_ENDED, (A.SPEAK,)),
    (S.USER_UNFINISHED, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),
    # the same for a message the judge reads as going on, but held for a listener's pause only; the final of
    # the words judged keeps it (its own judgement may end it: END_LIKELY)
    (S.USER_SPEAKING, MAY_GO_ON): (S.USER_MAY_GO_ON, (A.WITHDRAW,)),
    (S.USER_PAUSING, MAY_GO_ON): (S.USER_MAY_GO_ON, (A.WITHDRAW,)),
    (S.TURN_ENDED, MAY_GO_ON): (S.USER_MAY_GO_ON, (A.WITHDRAW,)),
    (S.USER_MAY_GO_ON, VAD_START): (S.USER_SPEAKING, ()),
    (S.USER_MAY_GO_ON, PARTIAL): (S.USER_SPEAKING, (A.ASK,)),
    (S.USER_MAY_GO_ON, FINAL): (S.USER_MAY_GO_ON, (A.ASK,)),
    (S.USER_MAY_GO_ON, UNFINISHED): (S.USER_UNFINISHED, ()),
    (S.USER_MAY_GO_ON, END_LIKELY): (S.TURN_ENDED, (A.SPEAK,)),
    (S.USER_MAY_GO_ON, ORACLE): (S.USER_MAY_GO_ON, (A.FEED,)),
    (S.USER_MAY_GO_ON, HOLD_EXPIRED): (S.TURN_ENDED, (A.SPEAK,)),
    # what is audible here is the assistant's backchannel ("Mm-hmm."): the floor stays the user's
    (S.USER_MAY_GO_ON, AUDIO_START): (S.USER_MAY_GO_ON, ()),
    (S.USER_MAY_GO_ON, AUDIO_END): (S.USER_MAY_GO_ON, ()),
    # a telling holds the floor for the user through their voice's stops and starts, from before the pause (the
    # front-end would take its turn before the pause's words are read); a reply begun meanwhile is withdrawn
    (S.USER_SPEAKING, TELLING): (S.USER_TELLING, ()),
    (S.USER_PAUSING, TELLING): (S.USER_TELLING, (A.WITHDRAW,)),
    (S.TURN_ENDED, TELLING): (S.USER_TELLING, (A.WITHDRAW,)),
    (S.USER_TELLING, VAD_START): (S.USER_TELLING, ()),
    (S.USER_TELLING, VAD_END): (S.USER_TELLING, ()),
    (S.USER_TELLING, PARTIAL): (S.USER_TELLING, (A.ASK,)),
    (S.USER_TELLING, FINAL): (S.USER_TELLING, (A.ASK,)),
    (S.USER_TELLING, ORACLE): (S.USER_TELLING, (A.FEED,)),
    (S.USER_TELLING, ASKING): (S.USER_SPEAKING, ()),  # a question: its turn end is silence's and the words' again
    (S.USER_TELLING, UNFINISHED): (S.USER_UNFINISHED, ()),
    (S.USER_TELLING, MAY_GO_ON): (S.USER_MAY_GO_ON, ()),  # a breath: "Mm-hmm."
    (S.USER_TELLING, END_LIKELY): (S.TURN_ENDED, (A.SPEAK,)),  # the story's end
    (S.USER_TELLING, HOLD_EXPIRED): (S.TURN_ENDED, (A.SPEAK,)),
    (S.USER_TELLING, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),  # a reply audible all the same (the cascade's)
}


def row(state: State, event: str) -> tuple[State, tuple[Action, ...]] | None:
    """The transition `event` makes from `state`: its own row, else the row from every state, else None."""
    return TRANSITIONS.get((state, event)) or TRANSITIONS.get((ANY, event))


@dataclass(frozen=True)
class Transition:
    t: float
    event: str
    before: State
    after: State
    actions: tuple[Action, ...]
    decision: Decision | None = None  # the judge's, for a talk-over event: why, and on which words

    def as_event(self) -> dict[str, Any]:
        return {"event": self.event, "from": self.before.value, "to": self.after.value,
                "actions": [a.value for a in self.actions]}


TurnTaker = Callable[[Transition], None]


@dataclass
class TurnMachine:
    """One conversation's turn state. `on` takes one event and returns the transition it made (None: no
    row); `talk_over` runs the judge over one frame and makes its decision's transition. Every transition
    goes to each of `takers` (the session's timeline and oracle scheduler) as it is made."""

    state: State = State.IDLE
    history: list[Transition] = field(default_factory=list)
    judge: BargeInJudge = field(default_factory=BargeInJudge)  # talked over: backchannel or interruption?
    takers: list[TurnTaker] = field(default_factory=list)
    frame_t: float = 0.0  # when this frame's output plays (set by the session): the time of the judge's moves
    # the latest transcript's words read as the end of the user's message (turn/reading.py, SURE_END): the
    # front-end takes a settled turn at the first quiet frame instead of waiting for that reading
    words_end: bool = False

    def on(self, event: str, t: float | None = None, decision: Decision | None = None) -> Transition | None:
        found = row(self.state, event)
        if found is None:
            return None
        after, actions = found
        step = Transition(self.frame_t if t is None else t, event, self.state, after, actions, decision)
        self.state = after
        self.history.append(step)
        for take in self.takers:
            take(step)
        return step

    @property
    def judging(self) -> bool:
        """A burst over the voice is being judged, or watched after a resume (`BargeInJudge.holding`)."""
        return self.judge.holding

    def talk_over(self, speaking: bool, transcript: str, talking: bool) -> Transition | None:
        """One frame of the user's speech against the voice (`BargeInJudge.step`): the judge's decision as
        the machine's transition, whose actions the voice takes."""
        return self._judged(self.judge.step(speaking, transcript, talking))

    def model_yields(self) -> Transition | None:
        """The front-end model said END while talked over (`BargeInJudge.model_yields`)."""
        return self._judged(self.judge.model_yields())

    def interrupted(self, reason: str, words: str) -> Transition | None:
        """The turn's final came while the voice was held for it: an interruption after all (the cascade)."""
        self.judge.reset()
        return self._judged(Decision(DROP, reason, words.strip(), 0.0))

    @property
    def user_holds_floor(self) -> bool:
        """The user holds the floor: after an interruption, until its answer is due, or inside an unfinished
        clause, until they go on or the hold's limit passes. Nothing is said meanwhile."""
        return self.state in (State.INTERRUPTED, State.USER_UNFINISHED, State.USER_MAY_GO_ON, State.USER_TELLING)

    def _judged(self, d: Decision | None) -> Transition | None:
        return None if d is None else self.on(JUDGED[d.action], decision=d)


# the events a session's timeline tells the machine; transcripts it is told by the session (to ask or not as
# its row says) and talk-over it judges itself
OBSERVED = frozenset({VAD_START, VAD_END, AUDIO_START, AUDIO_END, ORACLE})
# the events told by the session or the front-end that nothing else puts on the timeline: the session records
# them (with the judge's, where the cascade does not record its own) so that `follow` sees every move
UNRECORDED = frozenset({ANSWER_DUE, UNFINISHED, HOLD_EXPIRED, MAY_GO_ON, END_LIKELY, TELLING, ASKING})
EVENTS = frozenset(e for _, e in TRANSITIONS)


def as_markdown() -> str:
    """The states drawn (mermaid; self-loops left out) and the whole table, for docs/DESIGN.md (scripts/turn_table.py)."""
    def name(state: State | None) -> str:
        return "any state" if state is ANY else state.value

    moves: dict[tuple[str, str], list[str]] = {}
    for (before, event), (after, actions) in TRANSITIONS.items():
        if before is not after:
            label = event + (f" ({', '.join(a.value for a in actions)})" if actions else "")
            moves.setdefault(("any_state" if before is ANY else before.value, after.value), []).append(label)
    lines = ["```mermaid", "stateDiagram-v2", "    [*] --> idle"]
    lines += [f"    {b} --> {a}: {' / '.join(labels)}" for (b, a), labels in moves.items()]
    lines += ["```", "", "| state | event | next state | actions |", "|---|---|---|---|"]
    lines += [f"| {name(before)} | {event} | {after.value} | {', '.join(a.value for a in actions) or '-'} |"
              for (before, event), (after, actions) in TRANSITIONS.items()]
    return "\n".join(lines) + "\n"


def follow(events: Iterable[dict[str, Any]]) -> TurnMachine:
    """The machine run over a recorded timeline's events (`Timeline.events` or a saved timeline's)."""
    m = TurnMachine()
    for ev in events:
        if ev.get("kind") in EVENTS:
            m.on(ev["kind"], float(ev.get("t", 0.0)))
    return m
