"""A telling (turn/telling.py): two statements in a row hold the floor for the user through their pauses,
until the pause's reading ends it; a question ends it at once. The reader with a fake judge, the rule on its
own, and the front-end's hold in the machine's state."""
import asyncio

import pytest

from test_turn_reading import FakeJudge
from tandem.frontends.compact.turn_start import MAX_TELLING_WAIT_FRAMES
from tandem.turn.conversation import Conversation
from tandem.turn.machine import ASKING, TELLING, VAD_END, VAD_START, State, TurnMachine
from tandem.turn.reading import TELLING_END, UNSURE_END, TurnReader
from tandem.turn.telling import closed, sentences, tells_at_length

S = State
STORY = "I started a vegetable garden this spring. The tomatoes came up first, and then the beans."


@pytest.mark.parametrize("told, telling", [
    (STORY, True),
    (STORY + " Then one morning", True),  # the tail being said is no sentence yet
    ("I started a vegetable garden behind my house this spring. At first nothing", True),  # the second statement under way
    ("I started a vegetable garden behind my house this spring. At first", False),  # too few of its words yet
    ("I started a vegetable garden this spring.", False),  # one statement
    ("Hi. Thanks.", False),  # two, but no story
    (STORY + " What should I plant next?", False),  # a question ends it
    ("Where is the garden? It is big and it is green and it is mine.", False),  # one statement after the question
])
def test_two_statements_in_a_row_are_a_telling(told, telling):
    assert tells_at_length(told) is telling


def test_a_mark_where_the_audio_was_cut_ends_no_sentence():
    cut = "I started a vegetable garden behind my house this spring. It grew."  # the voice went on past "grew."
    assert tells_at_length(cut) and not tells_at_length(cut, cut=True)
    assert sentences("One. Two? three") == ["One.", "Two?"]


def test_the_told_words_run_from_the_assistants_last_reply_and_its_backchannels_count_as_none():
    conv = Conversation()
    conv.on_final("What is the capital of France?")
    conv.on_assistant("It is Paris.")
    conv.on_final("I went there last year.")
    conv.on_assistant("Mm-hmm.")
    conv.on_final("The food was great.")
    conv.on_partial("And the")
    assert conv.told_since_reply() == "I went there last year. The food was great. And the"


@pytest.mark.parametrize("final, as_said", [
    ("yesterday my train to work was cancelled", "yesterday my train to work was cancelled."),
    ("which country is the city of Rome in", "which country is the city of Rome in?"),
    ("How many wheels does a bicycle have", "How many wheels does a bicycle have?"),
    ("It was steep.", "It was steep."), ("Is it?", "Is it?"), ("", ""), ("...", "..."),
])
def test_a_final_without_its_mark_is_closed_as_the_sentence_it_is(final, as_said):
    assert closed(final) == as_said


def test_finals_that_whisper_left_unmarked_are_still_a_telling():
    """FDB dev set: festival's and flite-awb's stories were transcribed with no sentence marks at all, so no
    telling was ever seen and the tandem took the floor in both; each final is a sentence the endpoint ended."""
    conv = Conversation()
    conv.on_final("yesterday my train to work was cancelled")
    conv.on_partial("so I decided to cycle")
    assert conv.told_since_reply() == "yesterday my train to work was cancelled. so I decided to cycle"
    assert tells_at_length(conv.told_since_reply())


def test_a_reply_the_user_cut_short_and_went_on_over_does_not_end_the_telling():
    """FDB dev set: after a story's first sentence the tandem began "We adopted a two-week policy," and the
    user went on over it; counting that false start as a reply kept every later pause from being held."""
    conv = Conversation()
    conv.on_final("We adopted a puppy two weeks ago.")
    conv.on_assistant("We adopted a two-week policy,")
    conv.unsay("We adopted a two-week policy,", 0.4)  # the user talked over it: two words heard
    conv.on_final("She is a small brown dog with very big ears.")
    conv.on_partial("The first")
    assert conv.told_since_reply() == \
        "We adopted a puppy two weeks ago. She is a small brown dog with very big ears. The first"
    conv = Conversation()
    conv.on_final("We adopted a puppy two weeks ago.")
    conv.on_assistant("How lovely, what is her name?")
    conv.on_final("Pepper.")
    assert conv.told_since_reply() == "Pepper.", "a reply heard in full ends it"
    conv = Conversation()
    conv.on_final("We adopted a puppy two weeks ago.")
    conv.on_assistant("How lovely, what is her name?")
    rest = conv.unsay("How lovely, what is her name?", 0.5)  # paused under a backchannel...
    conv.on_assistant(rest)  # ...and resumed: the whole reply was heard after all
    conv.on_final("Pepper.")
    assert conv.told_since_reply() == "Pepper."


def test_a_reply_heard_some_words_in_and_cut_short_ends_the_telling_it_answered():
    """FDB dev, interruption: "Describe the rules of tennis for me, step by step." was answered, cut short by
    "Sorry, a different question." and the two were held as a story, so the new question got no answer."""
    conv = Conversation()
    conv.on_final("Describe the rules of tennis for me, step by step.")
    conv.on_assistant("Tennis is played by two players on a court")
    conv.unsay("Tennis is played by two players on a court", 0.5)  # four words heard
    conv.on_final("Sorry, a different question.")
    conv.on_partial("What is the opposite")
    assert conv.told_since_reply() == "Sorry, a different question. What is the opposite"
    assert not tells_at_length(conv.told_since_reply())


def reader_of(machine, judge, told):
    return TurnReader(machine, judge=judge, told=lambda: told[0])


async def paused(reader, text):
    reader.read(text, final=False, paused=True, said_more=False)
    await asyncio.sleep(0.05)


@pytest.mark.parametrize("p, after", [
    (0.0, S.USER_MAY_GO_ON),  # a breath: the backchannel's pause
    ((UNSURE_END + TELLING_END) / 2, S.USER_MAY_GO_ON),  # would end a message alone, not a telling
    (TELLING_END, S.TURN_ENDED),  # the story's end: the assistant's turn
    (None, S.USER_TELLING),  # no reading: the hold's limit decides
])
def test_a_telling_holds_the_floor_from_before_its_pause_until_the_reading_ends_it(p, after):
    async def go():
        m = TurnMachine(state=S.USER_SPEAKING)
        told = [STORY + " My neighbour gave me the"]
        reader = reader_of(m, FakeJudge({"My neighbour gave me the seeds.": p}), told)
        reader.read("My neighbour gave me the", final=False, paused=False, said_more=True)
        assert m.state is S.USER_TELLING, "held while the user still speaks: the front-end takes its turn early"
        m.on(VAD_END)
        m.on(VAD_START)
        m.on(VAD_END)
        assert m.state is S.USER_TELLING and m.user_holds_floor
        told[0] = STORY + " My neighbour gave me the seeds."
        await paused(reader, "My neighbour gave me the seeds.")
        state = m.state
        reader.read("My neighbour gave me the seeds.", final=True, paused=False, said_more=False)  # the final, after
        await asyncio.sleep(0.05)
        assert (m.state is S.TURN_ENDED) is (state is S.TURN_ENDED), "the reply the reading let begin is not taken back"
        return state
    assert asyncio.run(go()) is after


def test_a_question_ends_the_telling_and_is_answered_as_any_question():
    async def go():
        m = TurnMachine(state=S.USER_SPEAKING)
        told = [STORY + " What should"]
        judge = FakeJudge({"What should I plant next?": 0.8})
        reader = reader_of(m, judge, told)
        reader.read("What should", final=False, paused=False, said_more=True)
        assert m.state is S.USER_TELLING
        told[0] = STORY + " What should I plant next?"
        reader.read("What should I plant next?", final=False, paused=False, said_more=False)
        assert m.state is S.USER_SPEAKING and m.history[-1].event == ASKING
        reader.read("What should I plant next?", final=False, paused=False, said_more=False)
        assert m.state is S.USER_SPEAKING, "no telling again: the last sentence asks"
    asyncio.run(go())


def test_a_final_question_whisper_left_unmarked_ends_the_telling():
    async def go():
        m = TurnMachine(state=S.USER_SPEAKING)
        told = [STORY + " What should I plant next?"]  # the told words close each final
        reader = reader_of(m, FakeJudge({}), told)
        m.on(TELLING)
        reader.read("What should I plant next", final=True, paused=False, said_more=False)
        return m.state, m.history[-1].event
    assert asyncio.run(go()) == (S.USER_SPEAKING, ASKING)


def test_without_the_told_words_there_is_no_telling():
    async def go():
        m = TurnMachine(state=S.USER_SPEAKING)
        TurnReader(m).read(STORY, final=False, paused=False, said_more=False)
        return m.state
    assert asyncio.run(go()) is S.USER_SPEAKING


def test_the_front_end_is_held_in_a_telling_for_its_limit_then_takes_the_turn():
    from tandem.frontends.compact.frontend import CompactFrontEnd
    fe = CompactFrontEnd()
    m = TurnMachine(state=S.USER_SPEAKING)
    fe.follow_turns(m)
    m.on(TELLING)
    st = fe.state
    st.turn_start.quiet = MAX_TELLING_WAIT_FRAMES - 1
    assert st.held() and m.state is S.USER_TELLING
    st.turn_start.quiet = MAX_TELLING_WAIT_FRAMES
    assert not st.held() and m.state is S.TURN_ENDED, "the hold's limit: the assistant's turn"
