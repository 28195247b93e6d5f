"""The compact front-end's run-time text handling, with the model's choices scripted."""
import time

import pytest
import numpy as np
import torch

from tandem.speak.frontend import UserFrame
from tandem.turn.backchannel import PAUSE_FRAMES
from tandem.frontends.compact.frontend import MAX_LOOP_BLOCK, CompactFrontEnd, completes_a_loop
from tandem.frontends.compact.tokenizer import END, PAD
from tandem.turn.machine import ANSWER_DUE, State

SILENT = UserFrame(np.zeros(1920, np.float32), 0.02, False)


def script_model(fe: CompactFrontEnd, tokens: list[int]) -> None:
    """Make the front-end's model emit `tokens`, one per step."""
    it = iter(tokens)

    def step(state, user, vad, oracle, prev):
        logp = torch.full((1, fe.tokenizer.vocab_size), -30.0)
        logp[0, next(it)] = 0.0
        return logp

    fe.model.step = step


def scripted(fe: CompactFrontEnd, tokens: list[int]) -> list[list[str]]:
    """Step the front-end while its model emits `tokens`; the text pieces each step released."""
    script_model(fe, tokens)
    return [fe.step(SILENT, PAD).text for _ in tokens]


def test_first_word_of_a_response_is_released_at_once_when_it_is_a_whole_word():
    fe = CompactFrontEnd()
    tok = fe.tokenizer
    the, cap = tok.encode("The")[0], tok.encode(" capital")
    assert the in fe.whole_words
    out = scripted(fe, [PAD] * 8 + [the] + cap + [PAD, PAD])
    assert out[8] == ["The"], "no frame spent proving the first word complete"
    later = [t for step in out[9:] for t in step]
    assert later == ["capital"]


def test_later_words_and_unknown_first_words_wait_for_the_word_to_end():
    fe = CompactFrontEnd()
    tok = fe.tokenizer
    name = tok.encode(" Zorblax")  # several pieces, not an English word
    assert len(name) > 1
    out = scripted(fe, [PAD] * 8 + name + [PAD, PAD])
    assert not any(out[8: 8 + len(name)])
    assert out[8 + len(name)] == ["Zorblax"]


def test_pool_steps_sessions_like_separate_front_ends_with_the_copy_pointer_state(tmp_path):
    """Batched stepping (rows of one state, stepped in place or gathered) keeps every row's
    pointer state (last copied frame, attention) exactly as a front-end of its own would."""
    from tandem.frontends.compact.frontend import DEFAULT_CHECKPOINT, CompactPool
    from tandem.frontends.compact.model import CompactConfig, CompactLM
    from tandem.frontends.compact.checkpoint import load_checkpoint, save_checkpoint

    _, tok, _ = load_checkpoint(DEFAULT_CHECKPOINT)
    torch.manual_seed(0)
    model = CompactLM(CompactConfig(vocab=tok.vocab_size, d=32, layers=1, heads=2, window=16, pointer_follow=True))
    with torch.no_grad():  # make copying likely, so the pointer state is exercised
        model.copy_gate.bias.fill_(6.0)
    ck = tmp_path / "c.pt"
    save_checkpoint(ck, model, tok, {})
    words = tok.encode(" The capital of Zorblax is Quentoria")
    rng = np.random.default_rng(0)
    frames = []
    for k in range(40):
        o = [words[k % len(words)] if k % 9 else 2, PAD if k < 5 else words[(k * 3) % len(words)]]
        frames.append((o, [UserFrame(np.zeros(1920, np.float32), float(rng.random()), k < 10, "what is it")] * 2))
    alone = [CompactFrontEnd(ck) for _ in range(2)]
    pool = CompactPool(ck, capacity=3)
    a, b = pool.open(), pool.open()
    for o, users in frames:
        for i, fe in enumerate(alone):
            fe.step(users[i], o[i])
        pool.step_many([a, b], users, o)  # packed: the leading rows, in place
    assert list(a.emitted) == list(alone[0].emitted) and list(b.emitted) == list(alone[1].emitted)
    assert int(pool.cache["last_src"][0]) == int(alone[0].cache["last_src"][0]) >= 0
    for o, users in frames[:10]:  # only the second row: gathered and scattered back
        alone[1].step(users[1], o[1])
        pool.step_many([b], users[1:], o[1:])
    assert list(b.emitted) == list(alone[1].emitted)


def test_a_response_that_starts_repeating_itself_is_stopped():
    fe = CompactFrontEnd()
    tok = fe.tokenizer
    yen = tok.encode(" yen (JPY)")
    assert len(yen) > 1
    out = scripted(fe, [PAD] * 8 + tok.encode("The currency is the") + yen * 4 + [PAD] * 4)
    said = " ".join(t for step in out for t in step)
    assert said.count("yen") == 3 and said.endswith("(JPY"), "cut in the third time round, not the fourth"
    assert fe.loops_stopped == 1


def test_a_one_piece_word_is_not_said_twice_in_a_row_while_the_oracle_is_awaited():
    """A front-end that has caught up with the feed ("The chemical symbol for gold is", then the LLM's
    "Au." a second later) said "gold is is is Au."; the repeat is silence instead, and the next word
    comes when it comes."""
    fe = CompactFrontEnd()
    tok = fe.tokenizer
    (is_,) = tok.encode(" is")
    au = tok.encode(" Au.")
    out = scripted(fe, [PAD] * 8 + tok.encode("The symbol is") + [is_, PAD, PAD, is_] + [PAD] * 8 + [is_] + au + [PAD] * 3)
    said = " ".join(t for step in out for t in step)
    assert said == "The symbol is Au.", said
    # a word said again once the repeat window has passed is a new sentence's, and is spoken
    fe.reset()
    out = scripted(fe, [PAD] * 8 + [is_] + [PAD] * 30 + [is_, PAD, PAD])
    assert " ".join(t for step in out for t in step) == "is is"


def test_repeats_that_are_not_loops_are_spoken():
    assert not completes_a_loop([1, 0, 0], 0), "1000"
    assert completes_a_loop([1, 0, 0, 0], 0)
    assert not completes_a_loop([5, 6, 5, 6], 5)
    assert completes_a_loop([5, 6, 5, 6, 5], 6)
    long_block = list(range(10, 10 + MAX_LOOP_BLOCK + 1))
    assert not completes_a_loop(long_block * 2 + long_block[:-1], long_block[-1]), "a rephrased clause is not a loop"


def test_the_first_word_is_not_cut_by_the_voice_activity_of_the_turn_it_answers():
    """The Listener's voice activity lags a frame or two, so the reply's first frames can still read
    as user speech; barge-in counts only the user's speech since the reply began."""
    import time

    from fakes import FakeTTS

    tts = FakeTTS()
    fe = CompactFrontEnd(tts=tts)
    the = fe.tokenizer.encode("The")[0]
    speaking = UserFrame(np.zeros(1920, np.float32), 1.0, True)
    lagging = UserFrame(np.zeros(1920, np.float32), 0.6, True)
    users = [speaking] * 10 + [lagging, lagging] + [SILENT] * 6
    script_model(fe, [PAD] * 10 + [the] + [PAD] * 7)
    heard = []
    for u in users:
        heard.append(float(np.abs(fe.step(u, PAD).audio).max()))
        time.sleep(0.01)  # the fake voice synthesizes in the voicer's thread
    assert tts.texts == ["The"]
    assert max(heard[11:]) > 0.1, "the first word was voiced, not cleared as a barge-in"

    # PAUSE_FRAMES of the user's speech while the reply plays still pause it (then the judge decides)
    fe.mouth.say(fe.tokenizer.encode(" capital")[0], False, SILENT)  # more to say: the voice is busy
    fe.mouth.say(PAD, False, SILENT)
    time.sleep(0.05)
    assert fe.voicer.busy
    script_model(fe, [PAD] * PAUSE_FRAMES)
    for u in [speaking] * PAUSE_FRAMES:
        fe.step(u, PAD)
    assert [d.action for d in fe.mouth.take_decisions()] == ["pause"]
    fe.close()


def test_a_word_the_cursor_will_finish_goes_to_the_voice_at_once():
    """A five-piece "Australia" read from the oracle one piece a frame kept the voice waiting; once the
    word's pieces are all fed, the Mouth voices it whole and lets the model's later pieces pass."""
    from tandem.frontends.compact.frontend import Mouth

    fe = CompactFrontEnd()
    tok = fe.tokenizer
    pieces = tok.encode(" Zorblax")
    assert len(pieces) >= 3
    mouth = Mouth(tok, fe.whole_words, None)
    out = [mouth.say(pieces[0], False, SILENT).text, mouth.say(pieces[1], False, SILENT, ahead=pieces[2:]).text]
    out += [mouth.say(p, False, SILENT, voiced=True).text for p in pieces[2:]] + [mouth.say(PAD, False, SILENT).text]
    assert out[1] == ["Zorblax"], "voiced when the cursor took the word, not when its last piece came"
    assert not any(out[2:]), "the model's later pieces of the word are not voiced again"


def test_after_an_interruption_the_dropped_reply_is_not_carried_on_in_the_users_pause():
    """"Stop, stop. [pause] What is...": the front-end used to go on with the reply it was told to stop in
    the pause ("A long story...", "a process"). After the drop the model is hushed and the Mouth keeps
    quiet until an answer to the interruption is fed (or the user has been quiet MAX_TURN_WAIT_FRAMES)."""
    from fakes import WordTTS
    from tandem.frontends.compact.turn_start import MAX_TURN_WAIT_FRAMES
    from tandem.frontends.compact.tokenizer import START

    # a scripted model says its script whatever the commit gate holds, and this answer never settles
    fe = CompactFrontEnd(tts=WordTTS(), commit=False)
    words = fe.tokenizer.encode(" once upon a time there was a dragon who lived in a cave far away from the city and"
                                " every night it flew over the hills looking for something new to eat before dawn")
    script_model(fe, [PAD] * 2 + words + words)
    answer = fe.tokenizer.encode(" Paris")[0]

    def frame(vad: float, transcript: str = "", oracle: int = PAD) -> bool:
        out = fe.step(UserFrame(np.zeros(1920, np.float32), vad, vad > 0.5, transcript), oracle)
        while fe.voicer.synthesizing:  # the voice keeps up within the frame (WordTTS is instant)
            time.sleep(0.001)
        return bool(np.max(np.abs(out.audio)) > 0)

    talking = [frame(0.02) for _ in range(10)]
    assert any(talking), "it was replying"
    burst = [frame(0.9, "Stop, stop." if i > 3 else "") for i in range(8)]  # the interruption's first words
    assert not any(burst[4:]), "it fell silent"
    assert [d.action for d in fe.mouth.decisions][-1] == "drop"
    pause = [frame(0.02, "Stop, stop.") for _ in range(MAX_TURN_WAIT_FRAMES - 1)]
    assert not any(pause), "the dropped reply is not carried on in the pause"
    assert fe.state.after_drop and fe.mouth.floor.state is State.INTERRUPTED, "the floor is the user's"
    question = [frame(0.9, "Stop, stop. What is the capital of France?") for _ in range(6)]
    fed = [frame(0.9, "Stop, stop. What is the capital of France?", o) for o in (START, answer)]
    assert not any(question + fed)
    assert fe.state.answer_waiting, "an answer to the interruption was fed while the user spoke"
    after = [frame(0.02, "Stop, stop. What is the capital of France?") for _ in range(3 * MAX_TURN_WAIT_FRAMES)]
    assert any(after), "and once the user stops, the front-end answers"
    due = [m for m in fe.mouth.floor.history if m.event == ANSWER_DUE]
    assert len(due) == 1 and due[0].before is State.INTERRUPTED, "the answer fed gave the floor back, once"


def test_a_model_that_pauses_a_frame_in_the_interruption_still_answers_it():
    """Live, under load: the drop hushed the model, it chose silence for one frame while the user still spoke,
    the hush lifted, and it went on with the dropped reply, which the Mouth kept unsaid; its words kept the turn
    from arming, so the answer fed once the user stopped never counted, and the session said nothing for 4 s.
    The hush lasts as long as the Mouth holds back."""
    from fakes import WordTTS
    from tandem.frontends.compact.tokenizer import START

    fe = CompactFrontEnd(tts=WordTTS())
    words = fe.tokenizer.encode(" once upon a time there was a dragon who lived in a cave far away from the city and"
                                " every night it flew over the hills looking for something new to eat before dawn")
    script_model(fe, [PAD] * 2 + words[:16] + [PAD] + words * 3)
    answer = fe.tokenizer.encode(" Paris")[0]
    said: list[str] = []

    def frame(vad: float, transcript: str = "", oracle: int = PAD) -> None:
        out = fe.step(UserFrame(np.zeros(1920, np.float32), vad, vad > 0.5, transcript), oracle)
        while fe.voicer.synthesizing:
            time.sleep(0.001)
        said.extend(out.text)

    for _ in range(10):
        frame(0.02)
    for i in range(8):
        frame(0.9, "Stop, stop." if i > 3 else "")
    assert [d.action for d in fe.mouth.decisions][-1] == "drop"
    n = len(said)
    question = "Stop, stop. What is the capital of France?"
    for _ in range(4):
        frame(0.9, question)  # the model's one quiet frame comes here
    for o in (START, answer):
        frame(0.02, question, o)
    assert fe.state.hushed and fe.state.answer_waiting, "still hushed, with the answer counted"
    for _ in range(20):
        frame(0.02, question)
    assert said[n:], "the turn is taken (a scripted model says its script, where the real one reads the answer)"


class FakeVoicer:
    """Records what the Mouth hands the voice; `left` is the audio it says is still to play."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.left = 0.0
        self.busy = False

    def say(self, text: str) -> None:
        self.said.append(text)
        self.left += 0.3

    def remaining_s(self) -> float:
        return self.left

    def pull(self):  # noqa: ANN201
        return np.zeros(1920, np.float32), []

    def clear(self) -> None:
        pass


def test_words_read_ahead_join_the_next_segment_and_the_first_word_still_goes_alone():
    """"It" / "is" / "Oslo." reached the voice a word at a time, each its own synthesis at the pace of a
    lone word ("It is as low" to a listener): words the voice is handed ahead of the model
    (decoding.voice_ahead) wait with the model's own for the voice's next segment, and the first word of a
    reply still goes to the voice in the frame it is said, alone."""
    from tandem.frontends.compact.frontend import Mouth

    fe = CompactFrontEnd()
    tok = fe.tokenizer
    it, is_, oslo = tok.encode("It")[0], tok.encode(" is"), tok.encode(" Oslo.")
    mouth = Mouth(tok, fe.whole_words, None)
    mouth.voicer = voice = FakeVoicer()
    mouth.say(it, True, SILENT, ahead=is_)
    assert voice.said == ["It"], "the first word at once, alone"
    mouth.say(PAD, False, SILENT, ahead=oslo)
    assert voice.said == ["It"], "the voice has enough to say: the words read ahead wait"
    voice.left = 0.1
    for t in is_:
        mouth.say(t, False, SILENT, voiced=True)
    assert voice.said == ["It", "is Oslo."], "one segment; the model's own copy of 'is' is not voiced again"
    for t in oslo:
        mouth.say(t, False, SILENT, voiced=True)
    mouth.say(PAD, False, SILENT)
    assert voice.said == ["It", "is Oslo."]


def test_a_reply_dropped_after_the_user_stopped_still_takes_the_answer_fed_next():
    """A loadtest turn: the front-end's "was" came as the user's voice stopped, and the final's words then dropped
    the reply; its word had disarmed the turn, so the answer fed again at once was never taken. The drop arms
    the turn for the interruption's answer."""
    from tandem.frontends.compact.decoding import END
    from tandem.frontends.compact.tokenizer import START

    fe = CompactFrontEnd()
    word = fe.tokenizer.encode(" was")[0]
    script_model(fe, [PAD] * 8 + [word] + [PAD] * 40)
    answer = fe.tokenizer.encode(" Shakespeare")[0]
    q = "Who wrote the play Romeo and Juliet?"

    def frame(vad: float, oracle: int = PAD, settled: bool = False) -> None:
        fe.step(UserFrame(np.zeros(1920, np.float32), vad, vad > 0.5, q, oracle_settled=settled), oracle)

    for _ in range(6):
        frame(0.9)
    for _ in range(3):
        frame(0.02)  # the model's "was" comes in these frames, after the user's voice stopped
    assert word in fe.state.emitted
    fe.state.hush()  # the final's words dropped the reply
    n = len(fe.state.emitted)
    for o in (START, answer):
        frame(0.02, o, settled=True)
    for _ in range(20):
        frame(0.02, settled=True)
    assert any(t > END for t in list(fe.state.emitted)[n:]), "the answer's turn is taken"


def test_a_clause_the_user_has_not_finished_holds_the_model_until_they_go_on_or_the_limit_passes():
    """The machine's user_unfinished state ("My favourite kind of music is" [pause]): a model that would
    speak at the first quiet frame stays silent, the quiet counted, until the hold's limit; without the
    state it speaks at once."""
    from tandem.frontends.compact.turn_start import MAX_UNFINISHED_WAIT_FRAMES
    from tandem.turn.machine import HOLD_EXPIRED, UNFINISHED, VAD_START, TurnMachine

    def first_word_frame(hold: bool) -> tuple[int, TurnMachine]:
        fe = CompactFrontEnd()
        floor = TurnMachine()
        fe.follow_turns(floor)
        word = fe.tokenizer.encode(" Jazz")[0]
        script_model(fe, [PAD] * 6 + [word] * (MAX_UNFINISHED_WAIT_FRAMES + 10))
        floor.on(VAD_START)
        for _ in range(6):
            fe.step(UserFrame(np.zeros(1920, np.float32), 0.9, True, "My favorite kind of music is"), PAD)
        if hold:
            floor.on(UNFINISHED)
        for k in range(MAX_UNFINISHED_WAIT_FRAMES + 10):
            fe.step(UserFrame(np.zeros(1920, np.float32), 0.02, False, "My favorite kind of music is"), PAD)
            if fe.state.emitted[-1] > END:
                return k, floor
        return -1, floor

    at_once, _ = first_word_frame(hold=False)
    held, floor = first_word_frame(hold=True)
    assert at_once == 0
    assert held == MAX_UNFINISHED_WAIT_FRAMES, "silent through the hold, its quiet frames counted"
    assert [m.event for m in floor.history][-1] == HOLD_EXPIRED and floor.state is State.TURN_ENDED


@pytest.mark.parametrize("unfinished", [False, True])
def test_a_reply_begun_on_the_silence_is_withdrawn_unheard_when_the_pause_s_words_stop_inside_a_clause(unfinished):
    """"What would you say is [pause]": the model spoke at the first quiet frame, before the Listener's
    transcript of the pause; the transcript reads unfinished before the voice is heard (a slow synthesis
    here), so the machine's WITHDRAW drops the reply unsaid and the model is hushed through the hold.
    Without that transcript the reply is heard."""
    from fakes import FakeTTS
    from tandem.turn.machine import UNFINISHED, VAD_START, TurnMachine

    tts = FakeTTS(delay_s=0.3)
    fe = CompactFrontEnd(tts=tts)
    floor = TurnMachine()
    fe.follow_turns(floor)
    words = fe.tokenizer.encode(" I'm sorry for any confusion")
    script_model(fe, [PAD] * 4 + words + words + [PAD] * 40)
    floor.on(VAD_START)
    for _ in range(4):
        fe.step(UserFrame(np.zeros(1920, np.float32), 0.9, True, "What would you say"), PAD)
    fe.step(UserFrame(np.zeros(1920, np.float32), 0.02, True, "What would you say"), PAD)
    assert fe.state.emitted[-1] > END and (fe.mouth.word or fe.mouth.pending or fe.voicer.busy), "begun, not yet heard"
    if unfinished:
        floor.on(UNFINISHED)  # the pause's transcript, "What would you say is?"
    heard = []
    for _ in range(25):
        heard.append(float(np.abs(fe.step(UserFrame(np.zeros(1920, np.float32), 0.02, False,
                                                    "What would you say is?"), PAD).audio).max()))
        time.sleep(0.03)
    if unfinished:
        assert max(heard) == 0.0, "nothing of the withdrawn reply is heard"
        assert floor.state is State.USER_UNFINISHED and fe.state.hushed
    else:
        assert max(heard) > 0.1
    fe.close()
