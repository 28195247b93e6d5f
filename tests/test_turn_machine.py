"""The turn machine, transition by transition (no models), and over a conversation's events."""
import pytest

from tandem.turn.machine import (AUDIO_END, AUDIO_START, BACKCHANNEL, FINAL, INTERRUPTED, ORACLE, PARTIAL, PAUSED,
                                 TRANSITIONS, VAD_END, VAD_START, Action, State, TurnMachine, follow)

S, A = State, Action

# (from, event, to, actions): what a listener would say happens at each step of a conversation
CASES = [
    (S.IDLE, VAD_START, S.USER_SPEAKING, ()),
    (S.USER_SPEAKING, PARTIAL, S.USER_SPEAKING, (A.ASK,)),
    (S.USER_SPEAKING, VAD_END, S.USER_PAUSING, ()),
    (S.USER_PAUSING, VAD_START, S.USER_SPEAKING, ()),  # "I'd like to book ... a table": the turn goes on
    (S.USER_PAUSING, FINAL, S.TURN_ENDED, (A.ASK, A.SPEAK)),
    (S.USER_PAUSING, AUDIO_START, S.ASSISTANT_SPEAKING, ()),
    (S.USER_SPEAKING, AUDIO_START, S.ASSISTANT_SPEAKING, ()),  # in the Listener's hangover
    (S.TURN_ENDED, ORACLE, S.TURN_ENDED, (A.FEED,)),
    (S.TURN_ENDED, AUDIO_START, S.ASSISTANT_SPEAKING, ()),
    (S.TURN_ENDED, VAD_START, S.USER_SPEAKING, ()),
    (S.ASSISTANT_SPEAKING, ORACLE, S.ASSISTANT_SPEAKING, (A.FEED,)),
    (S.ASSISTANT_SPEAKING, PAUSED, S.TALKED_OVER, (A.YIELD,)),
    (S.ASSISTANT_SPEAKING, AUDIO_END, S.IDLE, ()),
    (S.ASSISTANT_SPEAKING, FINAL, S.ASSISTANT_SPEAKING, (A.ASK,)),  # the turn's final after the reply began
    (S.TALKED_OVER, BACKCHANNEL, S.ASSISTANT_SPEAKING, (A.RESUME,)),  # "mm-hm": talk on
    (S.TALKED_OVER, INTERRUPTED, S.USER_SPEAKING, (A.DROP,)),  # a new question: the reply goes
    (S.TALKED_OVER, AUDIO_END, S.USER_SPEAKING, ()),
]


@pytest.mark.parametrize("before,event,after,actions", CASES, ids=[f"{c[0].value}-{c[1]}" for c in CASES])
def test_each_transition(before, event, after, actions):
    m = TurnMachine(state=before)
    step = m.on(event, 1.5)
    assert step is not None and (step.before, step.after, step.actions) == (before, after, actions)
    assert m.state is after and m.history == [step] and step.t == 1.5


@pytest.mark.parametrize("state,event", [
    (S.IDLE, VAD_END), (S.IDLE, BACKCHANNEL), (S.USER_SPEAKING, PAUSED), (S.TALKED_OVER, PARTIAL),
    (S.TURN_ENDED, AUDIO_END), (S.USER_PAUSING, INTERRUPTED), (S.ASSISTANT_SPEAKING, VAD_START),
    (S.TALKED_OVER, FINAL)])
def test_an_event_with_no_row_changes_nothing(state, event):
    m = TurnMachine(state=state)
    assert m.on(event) is None
    assert m.state is state and m.history == []


def test_every_state_is_reached_and_left():
    reached = {after for after, _ in TRANSITIONS.values()}
    left = {s for s, _ in TRANSITIONS}
    assert reached == set(State) == left


def test_a_conversation_with_a_pause_a_backchannel_and_an_interruption():
    kinds = [VAD_START, PARTIAL, VAD_END, VAD_START, PARTIAL, VAD_END, FINAL, ORACLE, AUDIO_START, ORACLE,
             PAUSED, BACKCHANNEL, PAUSED, INTERRUPTED, PARTIAL, VAD_END, FINAL, AUDIO_START, AUDIO_END]
    m = follow([{"kind": k, "t": 0.1 * i} for i, k in enumerate(kinds)] + [{"kind": "llm_chunk", "t": 9.0}])
    assert [s.after for s in m.history] == [
        S.USER_SPEAKING, S.USER_SPEAKING, S.USER_PAUSING, S.USER_SPEAKING, S.USER_SPEAKING, S.USER_PAUSING,
        S.TURN_ENDED, S.TURN_ENDED, S.ASSISTANT_SPEAKING, S.ASSISTANT_SPEAKING, S.TALKED_OVER,
        S.ASSISTANT_SPEAKING, S.TALKED_OVER, S.USER_SPEAKING, S.USER_SPEAKING, S.USER_PAUSING, S.TURN_ENDED,
        S.ASSISTANT_SPEAKING, S.IDLE]
    actions = [a for s in m.history for a in s.actions]
    assert actions.count(A.DROP) == 1 and actions.count(A.RESUME) == 1 and actions.count(A.YIELD) == 2
    assert m.state is S.IDLE


async def test_a_session_follows_its_turns_on_its_timeline():
    """Through a real Session (the Listener and LLM faked): every transition is a `turn` event, in order."""
    from fakes import FakeFrontEnd, FakeOpenAIServer
    from test_session import run

    from tandem.record.timeline import TURN

    with FakeOpenAIServer() as srv:
        sess, _, _ = await run("tandem", srv.url, fe=FakeFrontEnd())
    turns = sess.timeline.of_kind(TURN)
    assert [(e["from"], e["to"]) for e in turns][:3] == [
        ("idle", "user_speaking"), ("user_speaking", "user_speaking"), ("user_speaking", "user_speaking")]
    moves = [(e["event"], e["to"]) for e in turns]
    assert ("assistant_audio_start", "assistant_speaking") in moves, "it took the turn"
    assert moves.index(("assistant_audio_start", "assistant_speaking")) > moves.index(("partial", "user_speaking"))
    assert any("feed" in e["actions"] for e in turns), "the oracle's text was fed"
    assert sess.turns.state is follow(sess.timeline.events).state, "the same states from the recorded events"
