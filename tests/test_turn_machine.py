"""The turn machine, transition by transition (no models), and over a conversation's events."""
import pytest

from tandem.turn.backchannel import PAUSE_FRAMES, BargeInJudge
from tandem.turn.machine import (ANSWER_DUE, ANY, END_LIKELY, HOLD_EXPIRED, MAY_GO_ON, UNFINISHED, AUDIO_END, AUDIO_START, BACKCHANNEL, FINAL, INTERRUPTED, ORACLE, PARTIAL, PAUSED,
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
    (S.TALKED_OVER, INTERRUPTED, S.INTERRUPTED, (A.DROP,)),  # a new question: the reply goes
    (S.TALKED_OVER, AUDIO_END, S.TALKED_OVER, ()),  # the paused voice's silence is the pause's own
    (S.TALKED_OVER, PARTIAL, S.TALKED_OVER, (A.ASK,)),  # the burst's words: asked, and read by the judge
    (S.TURN_ENDED, PARTIAL, S.TURN_ENDED, (A.ASK,)),
    # the judge's moves hold from every state: the voice may be busy before its audio is heard
    (S.USER_SPEAKING, PAUSED, S.TALKED_OVER, (A.YIELD,)),
    (S.TURN_ENDED, PAUSED, S.TALKED_OVER, (A.YIELD,)),
    (S.USER_PAUSING, INTERRUPTED, S.INTERRUPTED, (A.DROP,)),
    (S.ASSISTANT_SPEAKING, INTERRUPTED, S.INTERRUPTED, (A.DROP,)),  # late words, after a resume
    # the floor stays the user's through the interruption's pauses and its final, until its answer is due
    (S.INTERRUPTED, PARTIAL, S.INTERRUPTED, (A.ASK,)),
    (S.INTERRUPTED, FINAL, S.INTERRUPTED, (A.ASK,)),
    (S.INTERRUPTED, ORACLE, S.INTERRUPTED, (A.FEED,)),
    (S.INTERRUPTED, ANSWER_DUE, S.TURN_ENDED, (A.SPEAK,)),
    (S.INTERRUPTED, AUDIO_START, S.ASSISTANT_SPEAKING, ()),  # the cascade's answer, which waits for no front-end
    # "My favourite kind of music is" [pause]: the floor stays the user's, heard in any of the user's states
    # (a reply begun on the silence, not yet audible, is withdrawn)
    (S.USER_PAUSING, UNFINISHED, S.USER_UNFINISHED, (A.WITHDRAW,)),
    (S.USER_SPEAKING, UNFINISHED, S.USER_UNFINISHED, (A.WITHDRAW,)),  # the Listener's vad_end lags the speech
    (S.TURN_ENDED, UNFINISHED, S.USER_UNFINISHED, (A.WITHDRAW,)),  # the final of an unfinished clause
    (S.USER_UNFINISHED, VAD_START, S.USER_SPEAKING, ()),  # "... probably jazz": the user goes on
    (S.USER_UNFINISHED, PARTIAL, S.USER_SPEAKING, (A.ASK,)),  # read afresh
    (S.USER_UNFINISHED, FINAL, S.TURN_ENDED, (A.ASK, A.SPEAK)),
    (S.USER_UNFINISHED, HOLD_EXPIRED, S.TURN_ENDED, (A.SPEAK,)),  # they never went on: the turn is the assistant's
    (S.USER_UNFINISHED, PAUSED, S.TALKED_OVER, (A.YIELD,)),
    # "It was much steeper than I expected." [pause]: whole words, a message the judge reads as going on
    (S.USER_PAUSING, MAY_GO_ON, S.USER_MAY_GO_ON, (A.WITHDRAW,)),
    (S.USER_SPEAKING, MAY_GO_ON, S.USER_MAY_GO_ON, (A.WITHDRAW,)),
    (S.TURN_ENDED, MAY_GO_ON, S.USER_MAY_GO_ON, (A.WITHDRAW,)),
    (S.USER_MAY_GO_ON, VAD_START, S.USER_SPEAKING, ()),  # "About halfway up, ...": the story goes on
    (S.USER_MAY_GO_ON, PARTIAL, S.USER_SPEAKING, (A.ASK,)),
    (S.USER_MAY_GO_ON, FINAL, S.USER_MAY_GO_ON, (A.ASK,)),  # the final of the words judged: still their pause
    (S.USER_MAY_GO_ON, END_LIKELY, S.TURN_ENDED, (A.SPEAK,)),  # the final's words read as the message's end
    (S.USER_MAY_GO_ON, HOLD_EXPIRED, S.TURN_ENDED, (A.SPEAK,)),  # a listener's pause passed: the assistant's turn
    (S.USER_MAY_GO_ON, AUDIO_START, S.USER_MAY_GO_ON, ()),  # its "Mm-hmm." takes no floor
    (S.USER_MAY_GO_ON, AUDIO_END, S.USER_MAY_GO_ON, ()),
    (S.USER_MAY_GO_ON, ORACLE, S.USER_MAY_GO_ON, (A.FEED,)),
]


@pytest.mark.parametrize("before,event,after,actions", CASES, ids=[f"{c[0].value}-{c[1]}" for c in CASES])
def test_each_transition(before, event, after, actions):
    m = TurnMachine(state=before)
    step = m.on(event, 1.5)
    assert step is not None and (step.before, step.after, step.actions) == (before, after, actions)
    assert m.state is after and m.history == [step] and step.t == 1.5


@pytest.mark.parametrize("state,event", [
    (S.IDLE, VAD_END), (S.TURN_ENDED, AUDIO_END), (S.ASSISTANT_SPEAKING, VAD_START), (S.TALKED_OVER, VAD_START),
    (S.USER_SPEAKING, VAD_START), (S.IDLE, AUDIO_END), (S.INTERRUPTED, VAD_START), (S.INTERRUPTED, VAD_END),
    (S.INTERRUPTED, AUDIO_END), (S.IDLE, ANSWER_DUE), (S.TURN_ENDED, ANSWER_DUE),
    (S.ASSISTANT_SPEAKING, UNFINISHED), (S.TALKED_OVER, UNFINISHED), (S.INTERRUPTED, UNFINISHED), (S.IDLE, HOLD_EXPIRED),
    (S.ASSISTANT_SPEAKING, MAY_GO_ON), (S.INTERRUPTED, MAY_GO_ON), (S.TURN_ENDED, END_LIKELY), (S.USER_PAUSING, END_LIKELY)])
def test_an_event_with_no_row_changes_nothing(state, event):
    m = TurnMachine(state=state)
    assert m.on(event) is None
    assert m.state is state and m.history == []


def test_every_state_is_reached_and_left():
    reached = {after for after, _ in TRANSITIONS.values()}
    left = {s for s, _ in TRANSITIONS if s is not ANY}
    assert reached == set(State) == left


@pytest.mark.parametrize("state", list(State))
def test_every_transcript_is_asked_in_every_state(state):
    """The back-end hears each partial and final whoever holds the floor: what it starts is its own guard's."""
    for event in (PARTIAL, FINAL):
        assert Action.ASK in TurnMachine(state=state).on(event).actions


def _frames(m, frames, talking=True):
    return [(i, step) for i, (speaking, text) in enumerate(frames)
            if (step := m.talk_over(speaking, text, talking)) is not None]


def test_the_judge_moves_the_machine_and_names_the_voice_actions():
    """Talk-over as the mouth meets it: a burst pauses the voice (yield), its backchannel words resume it,
    and later words that are a question drop the reply, each as the machine's own transition."""
    m = TurnMachine(state=S.ASSISTANT_SPEAKING)
    quiet, prev = (False, "What is it?"), "What is it?"
    moves = _frames(m, [quiet] * 3 + [(True, prev)] * PAUSE_FRAMES + [(False, "What is it? Yeah.")] * 3)
    assert [(s.before, s.after, s.actions) for _, s in moves] == [
        (S.ASSISTANT_SPEAKING, S.TALKED_OVER, (A.YIELD,)), (S.TALKED_OVER, S.ASSISTANT_SPEAKING, (A.RESUME,))]
    assert moves[0][0] == 3 + PAUSE_FRAMES - 1, "paused once the burst outlasts a backchannel (PAUSE_FRAMES)"
    assert moves[1][1].decision.reason == "backchannel" and moves[1][1].decision.words == "Yeah."
    late = _frames(m, [(False, "What is it? Yeah, but why is the sky blue?")])
    assert [(s.after, s.actions, s.decision.reason) for _, s in late] == [(S.INTERRUPTED, (A.DROP,), "late words")]
    assert not m.judging


def test_a_voice_with_nothing_to_say_is_not_talked_over():
    m = TurnMachine()
    assert _frames(m, [(True, "")] * 10, talking=False) == [] and m.state is S.IDLE


def test_the_final_of_a_held_burst_interrupts_and_every_move_reaches_the_takers():
    taken = []
    m = TurnMachine(state=S.ASSISTANT_SPEAKING, judge=BargeInJudge(), takers=[taken.append])
    _frames(m, [(True, "")] * PAUSE_FRAMES)
    assert m.state is S.TALKED_OVER and m.judging
    step = m.interrupted("final", " Stop. What time is it? ")
    assert (step.after, step.actions, step.decision.words) == (S.INTERRUPTED, (A.DROP,), "Stop. What time is it?")
    assert taken == m.history and [s.event for s in taken] == [PAUSED, INTERRUPTED] and not m.judging


def test_a_conversation_with_a_pause_a_backchannel_and_an_interruption():
    kinds = [VAD_START, PARTIAL, VAD_END, VAD_START, PARTIAL, VAD_END, FINAL, ORACLE, AUDIO_START, ORACLE,
             PAUSED, BACKCHANNEL, PAUSED, INTERRUPTED, PARTIAL, VAD_END, FINAL, ORACLE, ANSWER_DUE, AUDIO_START,
             AUDIO_END]
    m = follow([{"kind": k, "t": 0.1 * i} for i, k in enumerate(kinds)] + [{"kind": "llm_chunk", "t": 9.0}])
    assert [s.after for s in m.history] == [
        S.USER_SPEAKING, S.USER_SPEAKING, S.USER_PAUSING, S.USER_SPEAKING, S.USER_SPEAKING, S.USER_PAUSING,
        S.TURN_ENDED, S.TURN_ENDED, S.ASSISTANT_SPEAKING, S.ASSISTANT_SPEAKING, S.TALKED_OVER,
        S.ASSISTANT_SPEAKING, S.TALKED_OVER, S.INTERRUPTED, S.INTERRUPTED, S.INTERRUPTED, S.INTERRUPTED,
        S.TURN_ENDED, S.ASSISTANT_SPEAKING, S.IDLE]
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
    assert [(e["event"], e["to"]) for e in turns if e["event"] != UNFINISHED][:3] == [
        ("vad_start", "user_speaking"), ("partial", "user_speaking"), ("partial", "user_speaking")]
    moves = [(e["event"], e["to"]) for e in turns]
    assert ("assistant_audio_start", "assistant_speaking") in moves, "it took the turn"
    assert moves.index(("assistant_audio_start", "assistant_speaking")) > moves.index(("partial", "user_speaking"))
    assert any("feed" in e["actions"] for e in turns), "the oracle's text was fed"
    assert sess.turns.state is follow(sess.timeline.events).state, "the same states from the recorded events"


class FakeJudgingFrontEnd:
    """A fake front-end that judges talk-over itself, as the compact one's mouth does: it is handed the
    session's turn machine."""

    def __init__(self):
        from fakes import FakeFrontEnd

        self.inner = FakeFrontEnd()
        self.tokenizer, self.name, self.floor = self.inner.tokenizer, "fake-judging", None

    def follow_turns(self, machine):
        self.floor = machine

    def reset(self):
        self.inner.reset()


async def test_a_session_s_machine_is_its_front_end_s_floor_and_a_drop_restarts_the_oracle():
    """One machine per conversation: the front-end judges with it, and its DROP move (the user's words
    dropped the reply) tells the scheduler, whose next stream then restarts the oracle."""
    from fakes import FakeListener

    from tandem.llm.client import ChatClient, LLMConfig
    from tandem.record.timeline import TURN
    from tandem.turn.backchannel import DROP, Decision
    from tandem.turn.session import Session, SessionConfig

    fe = FakeJudgingFrontEnd()
    client = ChatClient(LLMConfig(url="http://127.0.0.1:9/v1", model="m"))
    sess = Session(SessionConfig(mode="tandem", frame_vad=False), FakeListener([]), client, front_end=fe)
    assert fe.floor is sess.turns
    dropped = []
    sess.scheduler.reply_dropped = lambda by_words=False: dropped.append(by_words)
    sess.turns.on(INTERRUPTED, 2.0, decision=Decision(DROP, "words", "Stop", 0.5))
    sess.turns.on(INTERRUPTED, 3.0, decision=Decision(DROP, "long", "", 1.7))
    assert dropped == [True, False]
    assert [(e["t"], e["event"], e["actions"]) for e in sess.timeline.of_kind(TURN)] == [
        (2.0, INTERRUPTED, ["drop"]), (3.0, INTERRUPTED, ["drop"])]
    await client.aclose()


def test_design_draws_the_machine_s_own_table():
    """docs/DESIGN.md's diagram and table are the machine's (rerun scripts/turn_table.py after a change)."""
    from pathlib import Path

    from tandem.turn.machine import as_markdown

    design = (Path(__file__).resolve().parents[1] / "docs" / "DESIGN.md").read_text()
    block = design.split("<!-- turn-table: made by scripts/turn_table.py -->\n")[1].split("<!-- /turn-table -->")[0]
    assert block == as_markdown()
