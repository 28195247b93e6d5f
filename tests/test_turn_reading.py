"""The reader of a pause's words: the words' own hold, then the turn-end judge (a fake one here; the real one
against the embedded LLM in test_turn_end_judge.py)."""
import asyncio

import pytest

from tandem.turn.machine import END_LIKELY, UNFINISHED, State, TurnMachine
from tandem.turn.reading import SURE_END, UNSURE_END, TurnReader

S = State


class FakeJudge:
    """Answers from a table after `delay_s`, as the embedded LLM would after its prompt evaluation."""

    def __init__(self, p: dict[str, float | None], delay_s: float = 0.01) -> None:
        self.p, self.delay_s, self.asked = p, delay_s, []

    async def p_end(self, text: str) -> float | None:
        self.asked.append(text)
        await asyncio.sleep(self.delay_s)
        return self.p.get(text)


def run(coro):
    return asyncio.run(coro)


async def read_then_wait(reader, text, **kw):
    move = reader.read(text, **{"final": False, "paused": True, "said_more": False, **kw})
    await asyncio.sleep(0.05)
    return move


@pytest.mark.parametrize("p,after", [(0.001, S.USER_MAY_GO_ON), (UNSURE_END, S.USER_PAUSING), (None, S.USER_PAUSING)])
def test_whole_words_the_judge_reads_as_going_on_hold_a_listener_s_pause(p, after):
    async def go():
        m = TurnMachine(state=S.USER_PAUSING)
        seen = []
        reader = TurnReader(m, judge=FakeJudge({"It was much steeper than I expected.": p}),
                            on_judged=lambda text, q: seen.append(q))
        await read_then_wait(reader, "It was much steeper than I expected.")
        return m, seen
    m, seen = run(go())
    assert m.state is after and seen == [p]


def test_the_words_hold_first_and_the_judge_is_not_asked():
    async def go():
        m = TurnMachine(state=S.USER_SPEAKING)
        judge = FakeJudge({})
        move = await read_then_wait(TurnReader(m, judge=judge), "My favourite kind of music is")
        return m, judge, move
    m, judge, move = run(go())
    assert move.event == UNFINISHED and m.state is S.USER_UNFINISHED and judge.asked == []


@pytest.mark.parametrize("text,kw", [("Which planet is closest to the sun?", {"paused": False}),
                                     ("Which planet is closest to the sun?", {"said_more": True}),
                                     ("Which planet is closest to the sun", {})])  # no sentence's mark: words alone
def test_speech_still_going_on_or_words_not_ended_as_a_sentence_are_not_judged(text, kw):
    async def go():
        m = TurnMachine(state=S.USER_SPEAKING)
        judge = FakeJudge({text: 0.0})
        await read_then_wait(TurnReader(m, judge=judge), text, **kw)
        return m, judge
    m, judge = run(go())
    assert judge.asked == [] and m.state is S.USER_SPEAKING


def test_a_judgement_overtaken_by_newer_words_or_by_the_voice_is_dropped():
    async def go(voice: list[bool], newer: bool):
        m = TurnMachine(state=S.USER_PAUSING)
        reader = TurnReader(m, judge=FakeJudge({"I started a garden.": 0.0}, delay_s=0.03),
                            voice_quiet=lambda: voice[0])
        reader.read("I started a garden.", final=False, paused=True, said_more=False)
        await asyncio.sleep(0.01)
        if newer:
            reader.read("I started a garden. At first", final=False, paused=False, said_more=False)
        else:
            voice[0] = False  # the user's voice begins again while the judge thinks
        await asyncio.sleep(0.06)
        return m
    assert run(go([True], newer=True)).state is S.USER_PAUSING
    assert run(go([True], newer=False)).state is S.USER_PAUSING


def test_the_final_judged_as_an_end_gives_the_turn_back():
    async def go():
        m = TurnMachine(state=S.USER_MAY_GO_ON)
        reader = TurnReader(m, judge=FakeJudge({"I need a recipe for pancakes, please.": 0.6}))
        m.on("final")
        await read_then_wait(reader, "I need a recipe for pancakes, please.", final=True, paused=False)
        return m
    m = run(go())
    assert [h.event for h in m.history] == ["final", END_LIKELY] and m.state is S.TURN_ENDED


@pytest.mark.parametrize("p,ends", [(0.8, True), (SURE_END, True), (0.2, False), (None, False)])
def test_words_judged_as_the_message_s_end_let_the_front_end_take_the_turn_at_once(p, ends):
    """The judge's chance over SURE_END marks the words as the message's end (`TurnMachine.words_end`), which the
    front-end reads to take a settled turn at the first quiet frame; newer words are unread until judged."""
    async def go():
        m = TurnMachine(state=S.USER_PAUSING)
        reader = TurnReader(m, judge=FakeJudge({"What is the capital of Peru?": p}))
        await read_then_wait(reader, "What is the capital of Peru?")
        judged = m.words_end
        reader.read("What is the capital of Peru? And", final=False, paused=False, said_more=False)
        return judged, m.words_end
    assert run(go()) == (ends, False)


def test_a_final_whisper_left_unmarked_is_judged_as_the_sentence_the_endpoint_ended():
    async def go():
        m = TurnMachine(state=S.TURN_ENDED)
        judge = FakeJudge({"I just got back from a walk.": 0.01})
        await read_then_wait(TurnReader(m, judge=judge), "I just got back from a walk", final=True, paused=False)
        return m, judge
    m, judge = run(go())
    assert judge.asked == ["I just got back from a walk."] and m.state is S.USER_MAY_GO_ON


def test_an_unmarked_final_that_stops_inside_a_clause_is_held_not_closed():
    """"How many" closed as "How many?" would read whole: the words are read as the Listener wrote them."""
    async def go():
        m = TurnMachine(state=S.TURN_ENDED)
        judge = FakeJudge({"How many?": 0.34})
        move = await read_then_wait(TurnReader(m, judge=judge), "How many", final=True, paused=False)
        return m, judge, move
    m, judge, move = run(go())
    assert move.event == UNFINISHED and judge.asked == [] and not m.words_end


def test_the_cascade_and_other_llms_get_no_judge():
    from tandem.llm.client import LLMConfig
    from tandem.llm.local_server import MODEL_ALIAS
    from tandem.turn.session_config import SessionConfig

    class Client:
        def __init__(self, model):
            self.config = LLMConfig(url="http://127.0.0.1:1/v1", model=model)

    m = TurnMachine()
    quiet, judged = (lambda: True), (lambda t, p: None)
    assert TurnReader.of_session(m, SessionConfig(mode="tandem"), Client(MODEL_ALIAS), quiet, judged).judge is not None
    assert TurnReader.of_session(m, SessionConfig(mode="cascade"), Client(MODEL_ALIAS), quiet, judged).judge is None
    assert TurnReader.of_session(m, SessionConfig(mode="tandem"), Client("gpt-4o"), quiet, judged).judge is None
    assert TurnReader.of_session(m, SessionConfig(mode="tandem", judge_turn_end=False), Client(MODEL_ALIAS), quiet,
                                 judged).judge is None
    told = lambda: ""  # noqa: E731
    assert TurnReader.of_session(m, SessionConfig(), None, quiet, judged, told).told is told
    assert TurnReader.of_session(m, SessionConfig(hold_telling=False), None, quiet, judged, told).told is None
