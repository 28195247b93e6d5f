"""The conversation's turn state in one place: who holds the floor, and every transition between states.

Fed by events as the session sees them (the timeline's kinds: voice activity, partial and final
transcripts, the assistant's audio starting and ending, the voice paused under the user's speech, the
talk-over judged a backchannel or an interruption, an oracle arriving), it moves between six states and
names, for each transition, the actions the session takes there (start an oracle stream, feed the oracle,
yield the floor, resume, drop the reply). One table holds every transition; an event a state has no row
for changes nothing, which is itself a decision (a voice-activity start under the reply is not yet talk-over:
the voice's own rule pauses it, `voice_pause`).

Today the machine follows the session (`Session.turns`) and is on every timeline as `turn` events, while
the actions are still taken by the rules it is to replace (docs/DESIGN.md, "Turns", lists each rule and
the transition it becomes). `follow` derives the same states from a recorded timeline's events.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable


class State(str, Enum):
    IDLE = "idle"  # nobody speaks, nothing is asked
    USER_SPEAKING = "user_speaking"  # the user's voice is active
    USER_PAUSING = "user_pausing"  # the voice stopped, no final yet: the turn may go on
    TURN_ENDED = "turn_ended"  # the user's final came: the assistant's turn, not yet audible
    ASSISTANT_SPEAKING = "assistant_speaking"  # the assistant is audible
    TALKED_OVER = "talked_over"  # the user speaks over the assistant: its voice paused while that is judged


class Action(str, Enum):
    ASK = "ask"  # start (or restart) an oracle stream from what the user has said
    FEED = "feed"  # an oracle's text goes to the front-end's oracle stream
    SPEAK = "speak"  # the assistant may take the floor
    YIELD = "yield"  # pause the voice: the user is speaking over it
    RESUME = "resume"  # the burst was a backchannel: go on with the reply
    DROP = "drop"  # an interruption: the reply is dropped, the new turn is answered


# events, by the timeline's kinds (record/timeline.py), and the two the session derives
VAD_START, VAD_END, PARTIAL, FINAL = "vad_start", "vad_end", "partial", "final"
AUDIO_START, AUDIO_END = "assistant_audio_start", "assistant_audio_end"
PAUSED, BACKCHANNEL, INTERRUPTED = "voice_pause", "backchannel", "barge_in"
ORACLE = "oracle_append"

S, A = State, Action
# (state, event) -> (next state, actions). The rows are the whole of the turn logic's shape.
TRANSITIONS: dict[tuple[State, str], tuple[State, tuple[Action, ...]]] = {
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
    # ended (its vad_end comes 0.3-0.5 s after the speech); talk-over is the voice's pause, not this
    (S.USER_SPEAKING, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),
    (S.USER_PAUSING, VAD_START): (S.USER_SPEAKING, ()),  # a pause inside the turn
    (S.USER_PAUSING, PARTIAL): (S.USER_PAUSING, (A.ASK,)),  # the pause's partial may read as the whole question
    (S.USER_PAUSING, FINAL): (S.TURN_ENDED, (A.ASK, A.SPEAK)),
    (S.USER_PAUSING, ORACLE): (S.USER_PAUSING, (A.FEED,)),
    (S.USER_PAUSING, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),  # taken on the pause, before the final
    (S.TURN_ENDED, ORACLE): (S.TURN_ENDED, (A.FEED,)),
    (S.TURN_ENDED, AUDIO_START): (S.ASSISTANT_SPEAKING, ()),
    (S.TURN_ENDED, VAD_START): (S.USER_SPEAKING, ()),  # the user goes on before the assistant spoke
    (S.TURN_ENDED, FINAL): (S.TURN_ENDED, (A.ASK,)),  # a second final of the same turn
    (S.ASSISTANT_SPEAKING, ORACLE): (S.ASSISTANT_SPEAKING, (A.FEED,)),
    (S.ASSISTANT_SPEAKING, PAUSED): (S.TALKED_OVER, (A.YIELD,)),
    (S.ASSISTANT_SPEAKING, INTERRUPTED): (S.USER_SPEAKING, (A.DROP,)),  # dropped without a pause first
    (S.ASSISTANT_SPEAKING, AUDIO_END): (S.IDLE, ()),
    # the turn's own transcript, late: the tandem often speaks before the final (and its last partials); the
    # scheduler keeps the stream that answers it or starts one (keep_on_same_final), a backchannel asks nothing
    (S.ASSISTANT_SPEAKING, PARTIAL): (S.ASSISTANT_SPEAKING, (A.ASK,)),
    (S.ASSISTANT_SPEAKING, FINAL): (S.ASSISTANT_SPEAKING, (A.ASK,)),
    (S.TALKED_OVER, BACKCHANNEL): (S.ASSISTANT_SPEAKING, (A.RESUME,)),
    (S.TALKED_OVER, INTERRUPTED): (S.USER_SPEAKING, (A.DROP,)),
    (S.TALKED_OVER, PAUSED): (S.TALKED_OVER, (A.YIELD,)),
    (S.TALKED_OVER, ORACLE): (S.TALKED_OVER, (A.FEED,)),
    (S.TALKED_OVER, AUDIO_END): (S.USER_SPEAKING, ()),  # the assistant fell silent under the user
}


@dataclass(frozen=True)
class Transition:
    t: float
    event: str
    before: State
    after: State
    actions: tuple[Action, ...]

    def as_event(self) -> dict[str, Any]:
        return {"event": self.event, "from": self.before.value, "to": self.after.value,
                "actions": [a.value for a in self.actions]}


@dataclass
class TurnMachine:
    """One conversation's turn state; `on` takes one event and returns the transition it made (None: no row)."""

    state: State = State.IDLE
    history: list[Transition] = field(default_factory=list)

    def on(self, event: str, t: float = 0.0) -> Transition | None:
        row = TRANSITIONS.get((self.state, event))
        if row is None:
            return None
        after, actions = row
        step = Transition(t, event, self.state, after, actions)
        self.state = after
        self.history.append(step)
        return step


EVENTS = frozenset(e for _, e in TRANSITIONS)


def follow(events: Iterable[dict[str, Any]]) -> TurnMachine:
    """The machine run over a recorded timeline's events (`Timeline.events` or a saved timeline's)."""
    m = TurnMachine()
    for ev in events:
        if ev.get("kind") in EVENTS:
            m.on(ev["kind"], float(ev.get("t", 0.0)))
    return m
