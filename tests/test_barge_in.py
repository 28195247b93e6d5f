"""Barge-in in both modes, and what the dialogue history keeps of a reply the user talked over.

The user asks, the assistant answers at length, the user talks over the answer from 3.5 s to 5.0 s
and asks something else (final at 5.5 s). The voice is `WordTTS` (0.25 s of steady level per word),
so the words heard are exactly the loud samples over 6000.
"""
import time

import numpy as np
import pytest

from fakes import FakeLLMBehaviour, FakeListener, FakeOpenAIServer, FakeTokenizer, WordTTS
from tandem.record import timeline as tl
from tandem.audio.frames import FRAME_SAMPLES
from tandem.turn.backchannel import (DROP, PAUSE_FRAMES, is_hum, FRAME_S, MAX_BACKCHANNEL_FRAMES, MAX_TALKED_OVER_FRAMES, MODEL_YIELD_FRAMES,
                                PAUSE, RESUME)
from tandem.bench.dialogues import Span, talk_through, yield_time
from tandem.speak.frontend import BARGE_IN_FRAMES
from tandem.turn.conversation import Conversation
from tandem.speak.frontend import FrontEndOutput, UserFrame
from tandem.frontends.compact.frontend import Mouth
from tandem.frontends.compact.tokenizer import END, PAD, START
from tandem.llm.client import ChatClient, LLMConfig
from tandem.think.oracle import make_policy
from tandem.turn.session import Session, SessionConfig
from tandem.speak.tts import Cut, Voicer

OVER_S, OVER_END_S, NEXT_FINAL_S = 3.5, 5.0, 5.5
# how soon the voice is silent after the user begins to talk over it: it talks on through PAUSE_FRAMES of
# speech (a backchannel's length), and the pause is heard from the frame after
YIELD_S = PAUSE_FRAMES * FRAME_S + 0.2
SCRIPT = [
    (2.0, {"kind": "final", "text": "tell me about France", "audio_start_s": 0.2, "audio_s": 1.7}),
    (NEXT_FINAL_S, {"kind": "final", "text": "what is the capital of Spain", "audio_start_s": OVER_S,
                    "audio_s": OVER_END_S}),
]
LONG = [f" word{i}" + ("." if i % 4 == 3 else "") for i in range(40)]  # ten 4-word sentences
WORDS = [w.strip() for w in LONG]


class _ByRequest(FakeOpenAIServer):
    """A request about France gets the long answer (slowly: still streaming at the barge-in), the
    next question a short one."""

    def __init__(self, long: list[str] = LONG, delay_s: float = 0.1) -> None:
        super().__init__(FakeLLMBehaviour())
        self.long, self.delay_s = long, delay_s

    async def _chat(self, request):
        first = "Spain" not in str(await request.json())
        self.behaviour.tokens = self.long if first else ["Madrid", " is", " the", " capital."]
        self.behaviour.token_delay_s = self.delay_s if first else 0.0
        return await super()._chat(request)


def frames(secs: float) -> np.ndarray:
    return np.zeros((int(secs / 0.08), FRAME_SAMPLES), np.float32)


def listener() -> FakeListener:
    return FakeListener(list(SCRIPT), in_speech_until=1.7, speech=[(OVER_S, OVER_END_S)])


def loud(out: np.ndarray, a: float, b: float) -> int:
    return int(np.sum(np.abs(out[int(a * 24000): int(b * 24000)]) > 0.01))


def assistant_said(messages: list[dict[str, str]]) -> str:
    """What a request tells the LLM the assistant said: its assistant message (the chat form of a
    follow-up, and the cascade's), else the "assistant:" line of the oracle prompt's lines form."""
    said = [m["content"] for m in messages if m["role"] == "assistant"]
    if not said:
        said = [ln[len("assistant: "):] for ln in messages[-1]["content"].splitlines() if ln.startswith("assistant: ")]
    assert len(said) == 1, messages
    return said[0]


def heard_words(out: np.ndarray) -> list[str]:
    return WORDS[: loud(out, 0, NEXT_FINAL_S) // int(WordTTS.WORD_S * 24000)]


async def test_cascade_stops_at_once_when_talked_over_and_answers_the_next_question():
    with _ByRequest() as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m"))
        voicer = Voicer(WordTTS())
        sess = Session(SessionConfig(mode="cascade", frame_vad=False), listener(), client, voicer=voicer)
        out = await sess.run(frames(8.0))
        voicer.close()
        await client.aclose()
    assert loud(out, 2.0, OVER_S) > 0.5 * 24000, "the reply was playing when the user cut in"
    assert loud(out, OVER_S + YIELD_S, NEXT_FINAL_S) == 0, "silent soon after the user's onset"
    assert loud(out, NEXT_FINAL_S, 8.0) > 0, "the next question is answered"
    # the voice pauses once the burst outlasts a backchannel; a burst longer than one stays paused until
    # its words come (this Listener sends none before the final), and they drop the reply
    pause = sess.timeline.of_kind(tl.VOICE_PAUSE)
    assert len(pause) == 1 and OVER_S + (PAUSE_FRAMES - 1) * FRAME_S < pause[0]["t"] < OVER_S + YIELD_S
    barge = sess.timeline.of_kind(tl.BARGE_IN)
    assert len(barge) == 1 and barge[0]["llm_cancelled"] and barge[0]["reason"] in ("final", "words")
    assert pause[0]["t"] < barge[0]["t"] < NEXT_FINAL_S + 0.2
    assert not sess.timeline.of_kind(tl.BACKCHANNEL)
    assert [e["reason"] for e in sess.timeline.of_kind(tl.LLM_CANCEL)] == ["barge-in"]
    assert srv.tokens_sent < len(LONG) + 4, "the first answer's stream was cut off"
    # the next prompt holds only what was voiced: the sentences heard and the heard part of the cut one
    msgs = srv.requests[-1]["body"]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    said = heard_words(out)
    assert 4 <= len(said) < len(WORDS)
    heard = " ".join(said)
    assert msgs[2]["content"] == heard[:1].upper() + heard[1:], "as a sentence"
    assert sess.timeline.of_kind(tl.ASSISTANT_CUT), "the cut sentence is on the timeline"
    assert "Madrid" in " ".join(e["text"] for e in sess.timeline.of_kind(tl.ASSISTANT_TEXT))


class MouthFrontEnd:
    """The compact front-end's real Mouth (grouping, voice, barge-in) speaking the oracle's words as
    if the model had chosen them: the tandem's voice side without the model."""

    name = "mouth"

    def __init__(self) -> None:
        self.tokenizer = FakeTokenizer()
        self.tokenizer.start_id, self.tokenizer.pad_id = START, PAD
        self.tokenizer.vocab = {}
        base_encode = self.tokenizer.encode
        self.tokenizer.encode = lambda text: [i + END for i in base_encode(text)]  # ids above END
        base_decode = self.tokenizer.decode
        self.tokenizer.decode = lambda ids: base_decode([i - END for i in ids])
        self.tokenizer.starts_word = lambda i: i > END
        self.mouth = Mouth(self.tokenizer, frozenset(), WordTTS())
        self.began = False

    @property
    def voicer(self) -> Voicer | None:
        return self.mouth.voicer

    def reset(self) -> None:
        self.mouth.reset()

    def follow_turns(self, machine) -> None:  # as CompactFrontEnd: the mouth judges with the session's machine
        self.mouth.floor = machine

    def step(self, user: UserFrame, oracle_token: int) -> FrontEndOutput:
        tok = oracle_token if oracle_token > END else PAD
        began = tok > END and not self.began
        self.began |= began
        return self.mouth.say(tok, began, user)

    def step_batch(self, users, tokens):
        return [self.step(u, t) for u, t in zip(users, tokens)]


async def test_tandem_history_after_a_barge_in_holds_only_what_was_voiced():
    # 16 words, all fed (one a frame) before the user cuts in: what follows the barge-in is never voiced
    with _ByRequest(LONG[:16], delay_s=0.0) as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m"))
        fe = MouthFrontEnd()
        sess = Session(SessionConfig(mode="tandem", frame_vad=False), listener(), client, front_end=fe,
                       oracle_policy=make_policy("prefix"))
        out = await sess.run(frames(7.0))
        fe.mouth.close()
        await client.aclose()
    assert loud(out, OVER_S + YIELD_S, NEXT_FINAL_S) == 0, "the Mouth's barge-in silenced the voice"
    kinds = [e["kind"] for e in sess.timeline.events if e["kind"] in (tl.VOICE_PAUSE, tl.BARGE_IN)]
    assert kinds[:2] == [tl.VOICE_PAUSE, tl.BARGE_IN], "the Mouth's decisions are on the session's timeline"
    asked = [r["body"]["messages"] for r in srv.requests if "Spain" in str(r["body"])]
    assert asked, "the next question went to the LLM"
    said = heard_words(out)
    assert 2 <= len(said) < 16
    heard = " ".join(said)
    assert assistant_said(asked[0]) == heard[:1].upper() + heard[1:]


def test_unsay_keeps_the_words_heard_in_full():
    c = Conversation()
    c.on_final("tell me")
    c.on_assistant("The first sentence.")
    c.on_assistant("One two three four.")
    assert c.unsay("One two three four.", 0.6) == "three four."
    assert c.turns[-1] == ("assistant", "The first sentence. One two")
    c.on_final("stop")  # a later user turn: the cut still applies to the assistant's turn before it
    c.on_assistant("Alpha beta.")
    c2 = Conversation([("user", "q"), ("assistant", "Alpha beta.")])
    assert c2.unsay("Alpha beta.", 0.2) == "Alpha beta." and c2.turns == [("user", "q")], "nothing heard: no turn"
    assert c.unsay("not there", 0.5) == "" and c.turns[-1] == ("assistant", "Alpha beta.")
    assert c.unsay("beta.", 0.0) == "beta.", "a whole-word suffix"
    assert c.unsay("a.", 0.0) == "", "never part of a word"


def test_voicer_clear_reports_the_segment_cut_part_way():
    v = Voicer(WordTTS())
    try:
        v.say("one two three four")
        deadline = time.time() + 5
        while v.synthesizing and time.time() < deadline:
            time.sleep(0.01)
        _, started = v.pull(6000)
        assert started == ["one two three four"]
        assert v.clear() == Cut("one two three four", pytest.approx(0.25))
        assert v.take_cuts() == [Cut("one two three four", 0.25)] and v.take_cuts() == []
        assert v.clear() is None, "nothing playing: nothing cut"
    finally:
        v.close()


def test_a_reply_begun_before_the_final_comes_after_the_users_turn():
    """Tandem mode speaks before the final transcript exists: the history keeps the spoken order."""
    c = Conversation()
    c.on_partial("who painted")
    c.on_assistant("The")
    c.on_final("who painted the Mona Lisa")
    c.on_assistant("Mona Lisa was painted by Leonardo.")
    assert c.turns == [("user", "who painted the Mona Lisa"), ("assistant", "The Mona Lisa was painted by Leonardo.")]
    c.on_partial("and who")
    c.on_assistant("Hmm,")  # after the first reply, before the follow-up's final: a new reply
    c.on_final("and who painted Starry Night")
    assert c.turns[1:] == [("assistant", "The Mona Lisa was painted by Leonardo."),
                           ("user", "and who painted Starry Night"), ("assistant", "Hmm,")]
    c.on_partial("thanks")
    c.on_final("thanks")  # no early reply: appended as usual
    assert c.turns[-1] == ("user", "thanks")


def test_a_reply_begun_while_the_user_still_talks_over_the_last_one_is_not_voiced():
    """After a barge-in the model may start a new reply before the user has finished (the old
    Mouth reset its count at every reply start and said "The" over the user)."""
    fe = MouthFrontEnd()
    ids = fe.tokenizer.encode("one two three four five six")
    silent, talking = (UserFrame(np.zeros(FRAME_SAMPLES, np.float32), p, p > 0.5, "") for p in (0.02, 0.9))
    loud = []

    def frame(tok: int, began: bool, user: UserFrame) -> None:
        out = fe.mouth.say(tok, began, user)
        loud.append(float(np.abs(out.audio).max()) if len(out.audio) else 0.0)
        deadline = time.time() + 2
        while fe.voicer.synthesizing and time.time() < deadline:  # the voice's thread, as in real time:
            time.sleep(0.002)  # what was handed to it is ready by the next frame, so it would be heard

    for i, t in enumerate(ids):  # the reply, the voice busy
        frame(t, i == 0, silent)
    for _ in range(MAX_TALKED_OVER_FRAMES + 1):  # the user cuts in, longer than anyone nods: barge-in
        frame(PAD, False, talking)
    assert fe.mouth.yielded and not fe.voicer.busy
    again = fe.tokenizer.encode("The answer")
    frame(again[0], True, talking)  # the model begins again while the user still talks
    frame(again[1], False, talking)
    for _ in range(6):
        frame(PAD, False, talking)
    assert max(loud[-8:]) == 0.0, "nothing is voiced over the user"
    yes = fe.tokenizer.encode("Yes")[0]
    fe.mouth.whole_words = frozenset({yes})  # a one-piece word, handed to the voice in its own frame
    frame(yes, True, silent)  # the reply's first word, in the frame the user stops
    assert not fe.mouth.yielded, "once the user stops, the next reply may be voiced"
    for _ in range(3):
        frame(PAD, False, silent)
    fe.mouth.close()
    assert max(loud[-3:]) > 0.0, "its first word is heard, not dropped with the words said over the user"


# -- backchannels: talked through; interruptions: silent within YIELD_S -------------------------------
REPLY = "one two three four five six seven eight"  # 2 s of voice


def talked_over(burst: list[str | None], onset: int = 10, frames: int = 45):
    """The Mouth speaks REPLY (a word a frame) and the user speaks over it from frame `onset`, one
    entry of `burst` a frame: the transcript the Listener shows then (None: still the last turn's).
    Returns each frame's loudness, the Mouth and its voice's cuts."""
    fe = MouthFrontEnd()
    ids = fe.tokenizer.encode(REPLY)
    prev = "tell me about France"
    levels = []
    try:
        for k in range(frames):
            tok = ids[k] if k < len(ids) else PAD
            over = onset <= k < onset + len(burst)
            heard = burst[k - onset] if over and burst[k - onset] is not None else prev
            if k >= onset + len(burst) and burst and burst[-1] is not None:
                heard = burst[-1]  # the burst's transcript stays (its final)
            user = UserFrame(np.zeros(FRAME_SAMPLES, np.float32), 0.9 if over else 0.02, over, heard)
            out = fe.mouth.say(tok, k == 0, user)
            levels.append(float(np.abs(out.audio).max()))
            deadline = time.time() + 2
            while fe.voicer.synthesizing and time.time() < deadline:  # the voice's thread, as if in real time
                time.sleep(0.002)
        return np.array(levels), fe.mouth, fe.voicer.take_cuts()
    finally:
        fe.mouth.close()


def longest_silence_s(levels: np.ndarray) -> float:
    loud_at = np.flatnonzero(levels > 0)
    quiet = longest = 0
    for level in levels[loud_at[0]: loud_at[-1] + 1]:
        quiet = quiet + 1 if level == 0 else 0
        longest = max(longest, quiet)
    return longest * FRAME_S


@pytest.mark.parametrize("burst,decisions", [
    ([None, None, None, "Mm-hmm", "Mm-hmm"], []),  # "mm-hmm", 0.4 s, its partial late in the burst
    ([None] * 5, []),  # a cough: no words at all
    ([None, None, "Yeah.", "Yeah.", "Yeah."], []),
    ([None] * 4 + ["m"] * 3 + ["M-H-M-M-"] * 6, []),  # a slow "mm-hmm", 1.04 s: its first partial shows a hum
    ([None] * MAX_BACKCHANNEL_FRAMES, [PAUSE, RESUME]),  # as long as a backchannel, no words: paused at its end
    ([None] * 5 + ["and the making"] * 5, [PAUSE, RESUME]),  # a 0.8 s hum Whisper made words of
], ids=["mm-hmm", "cough", "yeah", "slow-hum", "long-cough", "made-up-words"])
def test_the_mouth_talks_through_a_backchannel(burst, decisions):
    levels, mouth, cuts = talked_over(burst)
    assert levels[10: 10 + PAUSE_FRAMES - 1].all(), "it talks on through the burst's start"
    assert longest_silence_s(levels) <= 0.5
    if not decisions:
        assert longest_silence_s(levels) == 0, "no gap at all"
    # the same segment went on where it paused: every word was played, none twice, none cut
    assert int(np.sum(levels > 0)) * FRAME_S == pytest.approx(len(REPLY.split()) * WordTTS.WORD_S, abs=FRAME_S)
    assert cuts == []
    assert [d.action for d in mouth.decisions] == decisions and not mouth.yielded


@pytest.mark.parametrize("burst,decided", [
    ([None] * (MAX_TALKED_OVER_FRAMES + 2), [(PAUSE, "talked over"), (DROP, "long")]),  # 1.8 s, no transcript yet
    ([None] * 8 + ["Wait, what about"] * 10, [(PAUSE, "talked over"), (DROP, "words")]),  # paused, then its words
    ([None] * 4 + ["Wait, what about"] * 10, [(DROP, "words")]),  # its words before it outlasts a backchannel
    ([None] * 8 + ["I think the answer is"] * 10, [(PAUSE, "talked over"), (DROP, "words")]),  # longer than a hum
], ids=["long", "late-words", "words", "long-words"])
def test_the_mouth_falls_silent_for_an_interruption_and_never_says_the_rest(burst, decided):
    levels, mouth, cuts = talked_over(burst)
    onset = 10
    assert not levels[onset + int(YIELD_S / FRAME_S):].any(), "silent soon after the onset, and after"
    heard = int(np.sum(levels > 0)) * FRAME_S
    assert heard < len(REPLY.split()) * WordTTS.WORD_S - 0.5, "the queued words were dropped, not voiced later"
    assert [(d.action, d.reason) for d in mouth.decisions] == decided
    assert len(cuts) == 1 and 0 < cuts[0].heard < 1, "the segment under way is cut where it fell silent"


def cascade_session(script, speech):
    return lambda client, voicer: Session(SessionConfig(mode="cascade", frame_vad=False), FakeListener(
        list(SCRIPT[:1]) + script, in_speech_until=1.7, speech=speech), client, voicer=voicer)


BC_S, BC_END_S = 3.5, 3.9  # "Mm-hmm." over the reply


async def run_cascade(srv, script, speech, seconds: float):
    """A cascade session over `seconds` of user frames, its Listener scripted, its voice WordTTS."""
    client = ChatClient(LLMConfig(url=srv.url, model="m"))
    voicer = Voicer(WordTTS())
    sess = cascade_session(script, speech)(client, voicer)
    out = await sess.run(frames(seconds))
    voicer.close()
    await client.aclose()
    return sess, out


async def test_cascade_talks_through_a_backchannel():
    script = [(BC_S + 0.3, {"kind": "partial", "text": "Mm-hmm", "audio_start_s": BC_S, "audio_s": BC_S + 0.3}),
              (BC_END_S + 0.5, {"kind": "final", "text": "Mm-hmm.", "audio_start_s": BC_S, "audio_s": BC_END_S})]
    with _ByRequest(delay_s=0.05) as srv:
        sess, out = await run_cascade(srv, script, [(BC_S, BC_END_S)], 6.0)
    through = talk_through(out, Span(BC_S, BC_END_S))
    assert through["talked_through"], through
    assert not sess.timeline.of_kind(tl.LLM_CANCEL, tl.BARGE_IN, tl.ASSISTANT_CUT), "neither cancelled nor dropped"
    assert [e["kind"] for e in sess.timeline.of_kind(tl.VOICE_PAUSE, tl.BACKCHANNEL, tl.BACKCHANNEL_FINAL)] == \
        [tl.BACKCHANNEL_FINAL], "a burst no longer than a backchannel is talked through, never paused"
    assert len(srv.requests) == 1 and srv.tokens_sent == len(LONG), "one answer, streamed to its end"
    assert loud(out, BC_END_S + 0.5, 6.0) == int((6.0 - BC_END_S - 0.5) * 24000), "still talking after it"
    # the pause counted the rest of the piece under way as unsaid; the resume counts it as said again
    said = " ".join(t for role, t in sess.conv.turns if role == "assistant").split()
    assert said == WORDS[: len(said)] and len(said) >= loud(out, 0, 6.0) // int(WordTTS.WORD_S * 24000)
    assert [t for role, t in sess.conv.turns if role == "user"] == ["tell me about France", "Mm-hmm."]


async def test_cascade_drops_the_reply_when_the_burst_shows_real_words():
    """Before the burst is long enough to count as an interruption, its partial says so."""
    script = [(OVER_S + 0.35, {"kind": "partial", "text": "Wait, what", "audio_start_s": OVER_S,
                               "audio_s": OVER_S + 0.35}), SCRIPT[1]]
    with _ByRequest() as srv:
        sess, out = await run_cascade(srv, script, [(OVER_S, OVER_END_S)], 8.0)
    assert loud(out, 2.0, OVER_S) > 0.5 * 24000 and loud(out, OVER_S + 0.5, NEXT_FINAL_S) == 0
    assert yield_time(out, OVER_S) <= 0.5, "words that open an interruption need not wait for its length"
    barge = sess.timeline.of_kind(tl.BARGE_IN)
    assert len(barge) == 1 and barge[0]["llm_cancelled"] and barge[0]["reason"] == "words"
    assert barge[0]["t"] < OVER_S + MAX_BACKCHANNEL_FRAMES * FRAME_S, "decided by the words, before the length"
    assert [e["reason"] for e in sess.timeline.of_kind(tl.LLM_CANCEL)] == ["barge-in"]
    assert "Madrid" in " ".join(e["text"] for e in sess.timeline.of_kind(tl.ASSISTANT_TEXT))


def model_says_end_while_talked_over(end_at: int, frames: int, heard: str = "") -> list[str]:
    """The Mouth talked over for `frames` frames, the model saying END in frame `end_at` (-1: never),
    the transcript showing `heard`: the decisions' reasons."""
    fe = MouthFrontEnd()
    ids = fe.tokenizer.encode("one two three four five six seven eight nine ten eleven twelve")
    silent, talking, heard_over = (UserFrame(np.zeros(FRAME_SAMPLES, np.float32), p, p > 0.5, text)
                                   for p, text in ((0.02, ""), (0.9, ""), (0.9, heard)))
    for i, t in enumerate(ids):
        fe.mouth.say(t, i == 0, silent)
        deadline = time.time() + 2
        while fe.voicer.synthesizing and time.time() < deadline:
            time.sleep(0.002)
    for k in range(frames):  # the transcript shows `heard` from the burst's 4th frame
        fe.mouth.say(END if k == end_at else PAD, False, heard_over if k >= 3 else talking)
    fe.mouth.close()
    reasons = [d.reason for d in fe.mouth.take_decisions()]
    assert fe.mouth.yielded == ("model" in reasons)
    return reasons


def test_the_models_own_yield_drops_a_burst_longer_than_a_backchannel_before_its_words_come():
    """A checkpoint trained with interruptions says END while the user talks over it: past a
    backchannel's length the reply is dropped then, not only when the transcript or the length
    decides. Silence alone changes nothing."""
    late = MODEL_YIELD_FRAMES + 1
    assert model_says_end_while_talked_over(late, late + 1) == ["talked over", "model"]
    assert model_says_end_while_talked_over(-1, late + 1) == ["talked over"], "paused, waiting for its words"


def test_the_models_yield_is_not_taken_over_a_short_burst_nor_over_a_heard_backchannel():
    """The model hears voice activity, not words: at 0.3-0.56 s of speech its END dropped an "Okay"
    and an "Oh, wow" the transcript would have shown as backchannels (docs/BENCHMARKS.md)."""
    assert model_says_end_while_talked_over(3, 5) == [], "talked through: no pause, no drop"
    assert model_says_end_while_talked_over(MAX_BACKCHANNEL_FRAMES + 1, MAX_BACKCHANNEL_FRAMES + 3) == ["talked over"]
    assert model_says_end_while_talked_over(MODEL_YIELD_FRAMES + 1, MODEL_YIELD_FRAMES + 3,
                                            heard="Mm-hmm") == [], "talked through"
    assert model_says_end_while_talked_over(MODEL_YIELD_FRAMES + 1, MODEL_YIELD_FRAMES + 3,
                                            heard="Okay") == []
