"""Reading a settled answer on at the voice's pace (tandem/frontends/compact/pace.py): the rule on a
hand-made cache, the scheduler's signal, and the shipped checkpoint stepped on an answer fed whole."""
import math
import re

import numpy as np
import torch

from fakes import FakeLLMBehaviour, FakeOpenAIServer, until
from tandem import timeline as tl
from tandem.frontend import UserFrame
from tandem.frontends.compact.decoding import CompactState, next_word
from tandem.frontends.compact.pace import MAX_LEAD_S, ReadOn
from tandem.frontends.compact.replay import answer_final_frames
from tandem.frontends.compact.tokenizer import END, PAD, START

THE, CAP, OF, P, ORT, UG, AL, DOT, IS = 40, 41, 42, 43, 44, 45, 46, 47, 48  # "▁The ▁capital ▁of ▁P ort ug al . ▁is"
WORD_STARTS = {THE, CAP, OF, P, IS}
V = 64


def cache_of(oracle: list[int], last_src: int = -1, weight: float = 0.0) -> dict[str, torch.Tensor]:
    n = 16
    slot_pos = torch.full((1, n), -1, dtype=torch.long)
    ora = torch.zeros(1, n, dtype=torch.long)
    for f, t in enumerate(oracle):
        slot_pos[0, f], ora[0, f] = f, t
    return {"slot_pos": slot_pos, "oracle": ora, "last_src": torch.tensor([last_src]), "copied_w": torch.tensor([weight])}


def state(read_from: int, lead_chars: int = 0) -> CompactState:
    st = CompactState.new(lambda text: [], starts_word=lambda t: t in WORD_STARTS,
                          read_on=ReadOn(tuple([4] * V), frozenset({DOT})))
    st.read_on.said(THE, True, False)  # a reply under way
    st.read_on.reply_chars = lead_chars
    st.read_from, st.prev = read_from, PAD
    return st


def wants(tok: int) -> torch.Tensor:
    logp = torch.full((V,), -20.0)
    logp[tok] = 0.0
    return logp - torch.logsumexp(logp, 0)


def test_where_the_model_would_wait_the_next_fed_word_is_read_on():
    st = state(read_from=1)  # "▁capital" said, read from frame 1
    assert next_word(cache_of([START, CAP, OF, P, ORT]), 0, st, wants(PAD)) == (2, OF), "the word after it is fed"
    assert next_word(cache_of([START, CAP, OF, P, ORT]), 0, st, wants(END)) is None, "the model stops: its choice"
    assert next_word(cache_of([START, CAP, OF, P, ORT]), 0, st, wants(THE)) is None, "the model says a word: its choice"


def test_a_word_the_feed_ends_with_is_left_to_the_model_unless_it_ends_a_sentence():
    st = state(read_from=1)
    assert next_word(cache_of([START, CAP, OF]), 0, st, wants(PAD)) is None, "nothing fed after it yet"
    assert next_word(cache_of([START, CAP, OF, PAD]), 0, st, wants(PAD)) is None, "the feed waits after it"
    st = state(read_from=2)
    assert next_word(cache_of([START, CAP, OF, P, ORT, UG, AL, DOT]), 0, st, wants(PAD)) == (3, P), \
        "'Portugal.' ends the sentence: nothing more is needed to read it"
    assert next_word(cache_of([START, CAP, OF, P, ORT, UG, AL]), 0, st, wants(PAD)) is None, "its end is not fed"


def test_nothing_is_read_on_from_an_older_stream_past_the_lead_or_without_a_copied_word():
    feed = [START, CAP, OF, P, ORT, UG, AL, IS]
    st = state(read_from=1)
    st.stream_start = 2  # a newer stream began after the word it would read on from
    assert next_word(cache_of(feed), 0, st, wants(PAD)) is None
    chars = math.ceil((MAX_LEAD_S + 0.1 + 0.08) / 0.058)  # said far faster than a voice can say it
    assert next_word(cache_of(feed), 0, state(read_from=1, lead_chars=chars), wants(PAD)) is None
    st = state(read_from=1)
    st.read_from = None  # the last word was the model's own, not read from the oracle
    assert next_word(cache_of(feed), 0, st, wants(PAD)) is None


def test_the_lead_counts_the_text_said_against_the_time_since_the_reply_began():
    ro = ReadOn(tuple([5] * V), frozenset())
    ro.said(THE, True, False)
    assert ro.may_read_on() and math.isclose(ro.lead_s(), 5 * 0.058 - 0.08)
    for _ in range(3):
        ro.said(CAP, False, True)
    assert ro.words_read_on == 3 and math.isclose(ro.lead_s(), 20 * 0.058 - 4 * 0.08)
    ro.said(END, False, False)
    assert not ro.may_read_on(), "the model stopped: no reply to read on"


async def test_the_scheduler_says_when_the_oracle_is_the_whole_answer_to_the_final():
    from test_scheduler import make

    with FakeOpenAIServer(FakeLLMBehaviour(first_token_delay_s=0.2)) as srv:
        sched, timeline, _ = make(srv)
        sched.on_partial("what is the capital of france")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert not sched.answers_final, "a partial's answer: the final may still differ"
        sched.on_final("what is the capital of france")
        assert sched.stats["kept"] == 1 and sched.answers_final, "kept by the final, and done"
        sched.on_partial("and of")
        assert not sched.answers_final, "the user speaks again"
        starts = sched.stats["starts"]
        sched.on_final("and of spain")
        assert sched.stats["starts"] == starts + 1 and not sched.answers_final, "started from the final, not done yet"
        await until(lambda: not sched.in_flight)
        assert sched.answers_final
        await sched.aclose()


def test_replay_takes_the_signal_from_the_recorded_events():
    events = [{"t": 0.1, "kind": "partial", "text": "what is"}, {"t": 0.2, "kind": "llm_start", "stream": 1},
              {"t": 0.3, "kind": "llm_adopt", "stream": 1}, {"t": 0.45, "kind": "final", "text": "what is"},
              {"t": 0.45, "kind": "llm_keep", "stream": 1, "reason": "final as heard when it started"},
              {"t": 0.6, "kind": "llm_done", "stream": 1}, {"t": 0.9, "kind": "partial", "text": "and"}]
    frames = {"t": [round(0.08 * k, 2) for k in range(14)]}
    flags = answer_final_frames({"events": events, "frames": frames})
    assert [k for k, v in enumerate(flags) if v] == [8, 9, 10, 11], "from the stream's end to the user's next words"


def test_the_shipped_model_says_a_settled_answer_sooner_and_word_for_word():
    """Stepped as a session steps it: the user asks, the whole answer is fed, the final settles it at
    once. Read on, the same words reach the voice sooner; never read on while the user speaks."""
    from tandem.frontends.compact.frontend import CompactFrontEnd

    fe = CompactFrontEnd()
    answer = "The capital of Portugal is Lisbon, a city on the Atlantic coast."
    oracle = [START] + fe.tokenizer.encode(answer)
    vad = [0.95] * 20 + [0.02] * 80

    def run(final_from: int | None) -> tuple[str, int, int]:
        fe.reset()
        said, lisbon = [], None
        for k, v in enumerate(vad):
            tok = oracle[k - 10] if 10 <= k < 10 + len(oracle) else PAD
            user = UserFrame(np.zeros(1920, np.float32), v, v > 0.5, "What is the capital of Portugal?",
                             answer_final=final_from is not None and k >= final_from)
            out = fe.step(user, tok)
            said += out.text
            if lisbon is None and "Lisbon" in " ".join(said):
                lisbon = k
        return re.sub(r"\s+", " ", " ".join(said)), lisbon, fe.state.read_on.words_read_on

    paced, paced_at, none = run(None)
    read, read_at, words = run(20)
    assert none == 0 and words >= 2
    assert read == paced and "Lisbon" in read, "the same words"
    assert read_at <= paced_at - 2, (read_at, paced_at)
