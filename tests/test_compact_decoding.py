"""TurnStart: greedy decoding, except that a reply starts once the model's chance of having started
since the user's voice stopped reaches one half."""
import math

import torch

from tandem.frontends.compact.turn_start import START_CHANCE, TurnStart
from tandem.frontends.compact.tokenizer import END, PAD, START

V = 16
WORD = 9  # the most likely word whenever speaking is not the most likely outcome


def frame(p_speak: float) -> torch.Tensor:
    """log-probabilities with `p_speak` spread over words (WORD most likely) and the rest on PAD."""
    p = torch.full((V,), 1e-6)
    p[PAD] = 1.0 - p_speak
    p[END + 1:] = p_speak * 0.2 / (V - END - 2)
    p[WORD] = p_speak * 0.8
    return (p / p.sum()).log()


def run(frames: list[tuple[float, float]]) -> list[int]:
    ts = TurnStart()
    return [ts.choose(frame(p), vad) for p, vad in frames]


def test_spread_out_wish_to_reply_starts_the_turn_where_its_chance_reaches_one_half():
    user = [(0.0, 0.9)] * 5
    after = [0.39, 0.05, 0.12, 0.16, 0.15, 0.07]
    out = run(user + [(p, 0.02) for p in after])
    chance, start = 0.0, None
    for i, p in enumerate(after):
        chance = 1 - (1 - chance) * (1 - p)
        if chance >= START_CHANCE:
            start = i
            break
    assert start is not None and 0 < start < len(after) - 1
    said = out[5:]
    assert said[:start] == [PAD] * start and said[start] == WORD
    assert all(t == PAD for t in said[start + 1:]), "greedy again once the reply has started"


def test_greedy_while_the_user_speaks_and_before_the_user_has_spoken():
    assert run([(0.3, 0.0)] * 20) == [PAD] * 20  # nobody spoke: nothing to reply to
    assert run([(0.3, 0.9)] * 20) == [PAD] * 20  # the user speaks: never start over them
    assert run([(0.7, 0.9)]) == [WORD]  # the model's own choice is kept


def test_a_pause_inside_the_turn_starts_the_count_again():
    pause = [(0.2, 0.02)] * 3  # 1 - 0.8**3 = 0.49: just under one half
    assert math.isclose(1 - 0.8 ** 3, 0.488)
    out = run([(0.0, 0.9)] + pause + [(0.0, 0.9)] + pause)
    assert all(t == PAD for t in out)


def test_no_second_reply_after_the_model_stopped():
    ts = TurnStart()
    ts.choose(frame(0.0), 0.9)
    assert ts.choose(frame(0.8), 0.02) == WORD  # the reply, by the model's own choice
    later = [ts.choose(frame(0.2), 0.02) for _ in range(60)]
    assert later == [PAD] * 60, "after its reply the model is greedy: small chances never add up to a new one"


def _cursor_cache(oracle: list[int], last_src: int, weight: float) -> dict[str, torch.Tensor]:
    """A one-row cache whose oracle frames 0.. hold `oracle`, right after a step whose `prev` was
    copied from frame `last_src` with the pointer's weight `weight`."""
    n = 8
    slot_pos = torch.full((1, n), -1, dtype=torch.long)
    ora = torch.zeros(1, n, dtype=torch.long)
    for f, t in enumerate(oracle):
        slot_pos[0, f], ora[0, f] = f, t
    return {"slot_pos": slot_pos, "oracle": ora, "last_src": torch.tensor([last_src]),
            "copied_w": torch.tensor([weight])}


def test_the_word_cursor_completes_a_copied_word_from_the_oracle():
    from tandem.frontends.compact.decoding import CompactState, word_rest

    P, ORT, UG, AL, IS = 40, 41, 42, 43, 44  # "▁P ort ug al ▁is"
    st = CompactState.new(lambda text: [], starts_word=lambda t: t in (P, IS))
    st.prev = P
    assert word_rest(_cursor_cache([P, ORT, UG, AL, IS], 0, 0.9), 0, st) == (1, ORT), "the word goes on"
    st.prev = AL
    assert word_rest(_cursor_cache([P, ORT, UG, AL, IS], 3, 0.9), 0, st) is None, "the next piece starts a word"
    st.prev = UG
    assert word_rest(_cursor_cache([P, ORT, UG], 2, 0.9), 0, st) is None, "not fed yet"
    assert word_rest(_cursor_cache([P, ORT, UG, AL], 2, 0.1), 0, st) is None, "the pointer was not on it"
    st.cursor = 2  # the cursor gave the piece at frame 2: it reads on from there, wherever the pointer is
    assert word_rest(_cursor_cache([P, ORT, UG, AL, UG, AL], 4, 0.9), 0, st) == (3, AL)
    st.prev = PAD
    assert word_rest(_cursor_cache([P, ORT], 0, 0.9), 0, st) is None, "nothing was said"
    st2 = CompactState.new(lambda text: [])
    st2.prev = P
    assert word_rest(_cursor_cache([P, ORT], 0, 0.9), 0, st2) is None, "no cursor without the tokenizer"


def _fed(oracle: list[int | None]) -> dict[str, torch.Tensor]:
    """A one-row cache whose oracle frames 0.. were fed `oracle` (None: that frame not fed yet)."""
    n = 16
    slot_pos = torch.full((1, n), -1, dtype=torch.long)
    ora = torch.zeros(1, n, dtype=torch.long)
    for f, t in enumerate(oracle):
        if t is not None:
            slot_pos[0, f], ora[0, f] = f, t
    return {"slot_pos": slot_pos, "oracle": ora, "last_src": torch.tensor([-1]), "copied_w": torch.tensor([0.0]),
            "attn": torch.zeros(1, n)}


# "▁It ▁is ▁Os lo . ▁It ▁was": word starts, and pieces that end a clause
IT, IS, OS, LO, DOT, WAS, P, ORT, UG, AL = range(40, 50)
STARTS = {IT, IS, OS, WAS, P}


def _ahead_state(clauses: bool = True):
    from tandem.frontends.compact.decoding import CompactState

    return CompactState.new(lambda text: [], starts_word=lambda t: t in STARTS,
                            ends_clause=(lambda t: t == DOT) if clauses else None)


def _copy(cache: dict[str, torch.Tensor], frame: int) -> dict[str, torch.Tensor]:
    """The pointer of the step just taken sat on `frame`."""
    cache["attn"].zero_()
    cache["attn"][0, frame] = 0.9
    return cache


def test_the_voice_reads_ahead_to_the_end_of_the_clause_as_each_word_is_fed_whole():
    from tandem.frontends.compact.ahead import voice_ahead

    st = _ahead_state()
    fed = [START, IT, IS, PAD]
    # the model copies "It" (frame 1): "is" is whole (a PAD follows it), the rest is not fed yet
    assert voice_ahead(_copy(_fed(fed), 1), 0, st, IT, 64) == [IS]
    assert not st.voiced
    # the feed waits for the LLM: PAD frames pass; "Oslo." is whole once the piece after it is fed
    assert voice_ahead(_fed(fed + [OS, LO, DOT]), 0, st, PAD, 64) is None, "its end is not fed yet"
    assert voice_ahead(_fed(fed + [OS, LO, DOT, IT]), 0, st, PAD, 64) == [OS, LO, DOT]
    # the model catches up: its own copies are not voiced again; the clause ended, nothing more is read
    later = _fed(fed + [OS, LO, DOT, IT, WAS, PAD])
    for tok in (IS, OS, LO, DOT):
        assert voice_ahead(later, 0, st, tok, 64) is None
        assert st.voiced, tok
    assert voice_ahead(later, 0, st, PAD, 64) is None, "the next clause waits for the model to copy its first word"
    assert voice_ahead(_copy(later, 7), 0, st, IT, 64) == [WAS], "the model copied it: a new run"


def test_reading_ahead_stops_at_a_new_oracle_and_at_a_word_the_model_did_not_copy():
    from tandem.frontends.compact.ahead import voice_ahead

    st = _ahead_state()
    assert voice_ahead(_copy(_fed([START, IT, IS, PAD, START, WAS, PAD]), 1), 0, st, IT, 64) == [IS], \
        "a new oracle (START) is another answer: the model decides whether to say it"
    st = _ahead_state()
    assert voice_ahead(_copy(_fed([START, IT, OS, START, WAS, PAD]), 1), 0, st, IT, 64) is None, \
        "a new oracle cuts the old one where it was: its last word may be cut short"
    st = _ahead_state()
    assert voice_ahead(_copy(_fed([START, IT, IS, PAD, LO, DOT, PAD]), 1), 0, st, IT, 64) == [IS], \
        "a word's tail without its head (KAME drops pieces that come after their frame) is not voiced"
    st = _ahead_state()
    assert voice_ahead(_fed([START, IT, IS, PAD]), 0, st, IT, 64) is None, "the model made the word up"
    st = _ahead_state()
    assert voice_ahead(_copy(_fed([START, IT, IS, OS, LO, DOT, PAD]), 1), 0, st, IT, 64) == [IS, OS, LO, DOT]
    assert voice_ahead(_fed([START, IT, IS, OS, LO, DOT, PAD]), 0, st, WAS, 64) is None
    assert not st.voiced and st.run is None, "the model went another way: the run ends, its own word is voiced"
    st = _ahead_state()
    voice_ahead(_copy(_fed([START, IT, IS, OS, LO, DOT, PAD]), 1), 0, st, IT, 64)
    voice_ahead(_copy(_fed([START, IT, IS, OS, LO, DOT, PAD]), 3), 0, st, OS, 64)
    assert st.voiced, "a word left out: the model reads on, and what it says was voiced already"
    st = _ahead_state()
    voice_ahead(_copy(_fed([START, IT, IS, OS, LO, DOT, PAD]), 1), 0, st, IT, 64)
    voice_ahead(_copy(_fed([START, IT, IS, OS, LO, DOT, START, OS, UG, PAD]), 7), 0, st, IS, 64)
    assert st.voiced, "not copied: the very next word handed"
    voice_ahead(_copy(_fed([START, IT, IS, OS, LO, DOT, START, OS, UG, PAD]), 7), 0, st, OS, 64)
    assert not st.voiced, "the newer oracle's word begins with the same piece but is another word"


def test_without_clauses_the_voice_reads_ahead_only_the_rest_of_the_copied_word():
    """The rule before `voice_ahead` (DecodeRules(voice_ahead=False)): a word the cursor finishes goes to
    the voice whole once all of it is fed; the next word waits for the model."""
    from tandem.frontends.compact.ahead import voice_ahead

    st = _ahead_state(clauses=False)
    st.cursor = 1  # the cursor just gave "ort" (frame 1)
    assert voice_ahead(_fed([P, ORT, UG, AL]), 0, st, ORT, 64) is None, "its end is not fed yet"
    st.cursor = 2
    assert voice_ahead(_fed([P, ORT, UG, AL, IS]), 0, st, UG, 64) == [AL]
    assert voice_ahead(_fed([P, ORT, UG, AL, IS, PAD]), 0, st, AL, 64) is None and st.voiced
    st.cursor = None
    assert voice_ahead(_copy(_fed([P, ORT, UG, AL, IS, PAD]), 4), 0, st, IS, 64) is None, \
        "a word the pointer copied is not read ahead without clauses"


def test_end_is_only_chosen_while_the_user_talks_over_the_reply():
    """A model trained to yield says END while the user talks over it; with the user silent, END is
    taken out, so a model that keeps feeding itself END still takes the turn that follows."""
    from tandem.frontends.compact.decoding import CompactState

    logp = torch.full((16,), -20.0)
    logp[END], logp[END + 3] = math.log(0.7), math.log(0.3)
    logp = logp - torch.logsumexp(logp, 0)
    st = CompactState.new(lambda text: [])
    assert st.decide(logp.clone(), vad_prob=0.9) == END, "the user talks: the model may yield"
    assert st.decide(logp.clone(), vad_prob=0.02) == END + 3, "the user is silent: END means nothing"


def test_after_a_word_read_from_the_oracle_no_piece_may_go_on_with_it():
    from tandem.frontends.compact.decoding import CompactState, copied_word_ended

    P, ORT, IS = 40, 41, 44
    st = CompactState.new(lambda text: [], starts_word=lambda t: t in (P, IS))
    st.prev, st.cursor = ORT, 1
    assert copied_word_ended(_cursor_cache([P, ORT, IS], 1, 0.0), 0, st), "the cursor gave the word's last piece"
    mask = st.continuations(48)
    assert mask[ORT] and not mask[P] and not mask[IS] and not mask[END], "only pieces that go on a word"
    st.cursor = None
    assert not copied_word_ended(_cursor_cache([P, ORT, IS], 1, 0.1), 0, st), "a word the model made up itself"


def test_a_turn_with_an_answer_waiting_is_taken_when_the_model_lets_the_moment_pass():
    """A model whose wish to speak stays low after the user stops would leave the question unanswered;
    with an oracle started and fed since the user began, the turn is taken MAX_TURN_WAIT_FRAMES later.
    Without an answer waiting (a backchannel, a pause) the model's own choice stands."""
    from tandem.frontends.compact.turn_start import MAX_TURN_WAIT_FRAMES, TurnStart

    logp = torch.full((16,), -20.0)
    logp[PAD], logp[END + 4] = math.log(0.99), math.log(0.01)  # speaking is never the likelier
    logp = logp - torch.logsumexp(logp, 0)
    for waiting in (False, True):
        ts = TurnStart()
        ts.choose(logp, vad_prob=0.9)  # the user speaks: armed
        said = [ts.choose(logp, vad_prob=0.05, answer_waiting=waiting) for _ in range(3 * MAX_TURN_WAIT_FRAMES)]
        spoke = [i for i, t in enumerate(said) if t > END]
        if waiting:
            assert spoke == [MAX_TURN_WAIT_FRAMES - 1], "taken once, at the deadline"
        else:
            assert spoke == [], "no answer waiting: silence stays the model's choice"


def test_a_settled_answer_takes_the_turn_soon_after_the_voice_stops_with_its_first_word():
    """Once the oracle answers the final transcript (the Listener ended the turn, the answer is there),
    a model that lets the moment pass is overruled SETTLED_TURN_WAIT_FRAMES after the voice stopped, not
    MAX_TURN_WAIT_FRAMES: the cascade would be speaking by then. The turn begins with the newest stream's
    first word (`opening`), not the model's likeliest word at a moment it does not want to speak ("sorry,",
    "Well,"); a settled turn whose stream has not fed its first word yet waits for it. Settled without an
    answer fed since the user began (an earlier turn's oracle) takes nothing."""
    from tandem.frontends.compact.turn_start import (ENDED_TURN_WAIT_FRAMES, MAX_TURN_WAIT_FRAMES,
                                                     SETTLED_TURN_WAIT_FRAMES, TurnStart)

    assert ENDED_TURN_WAIT_FRAMES < SETTLED_TURN_WAIT_FRAMES < MAX_TURN_WAIT_FRAMES
    logp = torch.full((16,), -20.0)
    logp[PAD], logp[END + 4] = math.log(0.99), math.log(0.01)  # silence likeliest; END + 4 the likeliest word
    logp = logp - torch.logsumexp(logp, 0)
    opening = END + 7
    cases = [  # answer waiting, settled, opening fed from frame, -> (frame spoken, token)
        (True, True, 0, [(SETTLED_TURN_WAIT_FRAMES - 1, opening)]),
        (True, "ends", 0, [(ENDED_TURN_WAIT_FRAMES - 1, opening)]),  # its words also read as the message's end
        (False, "ends", 0, []),
        (True, True, 6, [(6, opening)]),  # waits for the first word
        (True, False, 0, [(MAX_TURN_WAIT_FRAMES - 1, opening)]),
        (True, True, None, [(MAX_TURN_WAIT_FRAMES - 1, END + 4)]),  # no first word at all: the safety net's word
        (False, True, 0, []),
    ]
    for waiting, settled, fed_from, expect in cases:
        ts = TurnStart()
        ts.choose(logp, vad_prob=0.9)
        said = [ts.choose(logp, vad_prob=0.05, answer_waiting=waiting, settled=bool(settled),
                          opening=opening if fed_from is not None and k >= fed_from else None, ends=settled == "ends")
                for k in range(3 * MAX_TURN_WAIT_FRAMES)]
        assert [(i, t) for i, t in enumerate(said) if t > END] == expect, (waiting, settled, fed_from)
    ts = TurnStart()
    ts.choose(logp, vad_prob=0.9)
    said = [ts.choose(logp, vad_prob=v, answer_waiting=True, settled=True, opening=opening)
            for v in [0.05, 0.05, 0.9, 0.05, 0.05]]
    assert not any(t > END for t in said), "the user spoke again inside the wait: it starts from zero"
    eager = torch.full((16,), -20.0)
    eager[PAD], eager[END + 4] = math.log(0.3), math.log(0.7)
    ts = TurnStart()
    ts.choose(eager, vad_prob=0.9)
    assert ts.choose(eager, vad_prob=0.05, answer_waiting=True, settled=True, opening=opening) == END + 4, \
        "a turn the model takes itself begins with its own word"


def test_a_reply_the_model_begins_further_on_in_the_oracle_begins_at_its_first_word():
    """After the user talked over "It" and the oracle restarted, the model began again at its place in the
    dropped reply: "It by William Shakespeare.". A first word taken from further on in the oracle becomes
    the oracle's first word; the model's own words ("Okay,") and a word once the reply is under way stay."""
    from tandem.frontends.compact.turn_start import TurnStart

    opening, later, own = END + 7, END + 4, END + 5
    in_oracle = {opening, later}.__contains__
    eager = torch.full((16,), -20.0)
    eager[PAD], eager[later], eager[own] = math.log(0.3), math.log(0.6), math.log(0.1)
    eager = eager - torch.logsumexp(eager, 0)

    def first_word(logp: torch.Tensor, **kw) -> int:  # noqa: ANN003
        ts = TurnStart()
        ts.choose(logp, vad_prob=0.9)
        return ts.choose(logp, vad_prob=0.05, answer_waiting=True, settled=True, **kw)

    assert first_word(eager, opening=opening, in_oracle=in_oracle) == opening
    assert first_word(eager, opening=opening) == later, "without knowing the oracle's words, the model's word"
    assert first_word(eager, opening=None, in_oracle=in_oracle) == later, "no first word fed: the model's word"
    own_first = eager.clone()
    own_first[own], own_first[later] = float(eager[later]), float(eager[own])
    assert first_word(own_first, opening=opening, in_oracle=in_oracle) == own, "its own word, not the oracle's"
    ts = TurnStart()  # not armed: a word inside a reply under way
    assert ts.choose(eager, vad_prob=0.05, answer_waiting=True, opening=opening, in_oracle=in_oracle) == later

    from tandem.frontends.compact.decoding import CompactState

    def reply(hushed: bool, settled: bool = True, under_way: bool = False) -> int:
        """The oracle restarted and fed its words; the model wants `later`."""
        st = CompactState.new(lambda text: [], starts_word=lambda t: t in (opening, later, own))
        for fed in (START, opening, later):
            st.fed(fed)
        if under_way:
            st.begun_words[opening] += 1  # the reply said the oracle's first word, then waited
        st.turn_start.choose(eager, vad_prob=0.9)  # the user spoke
        if hushed:
            st.hush()
        st.answer_waiting = True
        said = [st.decide(eager, vad_prob=0.05, settled=settled, opening=opening) for _ in range(20)]
        return next(t for t in said if t > END)

    assert reply(hushed=True) == opening, "the reply after one the user dropped begins at the oracle's start"
    assert reply(hushed=False) == opening, "a reply to a settled answer begins where the answer does"
    assert reply(hushed=False, under_way=True) == later, "a reply under way goes on after a wait"
    assert reply(hushed=False, settled=False) == later, "an answer not settled: the model's word"


def test_only_an_oracle_started_during_the_users_turn_counts_as_an_answer_waiting():
    """Through the front-end: the user asks, an oracle stream starts and feeds words, the model stays
    silent: the turn is taken at the deadline. An answer's tail fed while nobody asked takes nothing."""
    import numpy as np

    from tandem.speak.frontend import UserFrame
    from tandem.frontends.compact.turn_start import MAX_TURN_WAIT_FRAMES
    from tandem.frontends.compact.frontend import CompactFrontEnd
    from tandem.frontends.compact.tokenizer import START

    fe = CompactFrontEnd(commit=False)  # the deadline alone: the answer here never settles (test_commit_gate.py)
    vocab = fe.tokenizer.vocab_size
    fe.model.step = lambda state, user, vad, oracle, prev: torch.where(  # the model only ever wants silence
        torch.arange(vocab) == PAD, 0.0, -30.0)[None].float()
    word = fe.tokenizer.encode(" Paris")[0]

    def run(oracle: list[int], vad: list[float]) -> list[int]:
        fe.reset()
        out = []
        for o, v in zip(oracle, vad):
            fe.step(UserFrame(np.zeros(1920, np.float32), v, v > 0.5), o)
            out.append(fe.prev)
        return out

    n = 6 + 3 * MAX_TURN_WAIT_FRAMES
    vad = [0.9] * 6 + [0.05] * (n - 6)
    asked = run([PAD, START, word, word, PAD, PAD] + [PAD] * (n - 6), vad)
    assert [i for i, t in enumerate(asked) if t > END] == [6 + MAX_TURN_WAIT_FRAMES - 1]
    tail_only = run([PAD] * 6 + [word] * (n - 6), vad)
    assert not any(t > END for t in tail_only), "words with no stream started this turn: no answer waiting"


def test_whole_words_are_read_ahead_only_once_the_oracle_answers_the_final_transcript():
    """An oracle from a partial is often replaced a few frames later ("It is London." read ahead, then
    "Edinburgh."): before the oracle is settled the voice gets only the rest of the word being copied."""
    from tandem.frontends.compact.ahead import voice_ahead

    fed = [START, IT, IS, PAD, OS, LO, DOT, PAD]
    st = _ahead_state()
    assert voice_ahead(_copy(_fed(fed), 1), 0, st, IT, 64, settled=False) is None
    assert voice_ahead(_fed(fed), 0, st, PAD, 64, settled=True) == [IS, OS, LO, DOT], "settled: read on"
    st = _ahead_state()
    cache = _copy(_fed(fed), 1)
    cache["reset_pos"] = torch.tensor([3])  # a newer oracle began after the word the run started from
    assert voice_ahead(cache, 0, st, IT, 64) is None, "what the older oracle held next is not read ahead"


def test_a_settled_oracle_is_read_beyond_its_feed():
    """The feed gives one token a frame: "The capital of Australia is" took 8 frames before "Canberra."
    reached the model. The voice reads what the settled oracle holds for the frames to come
    (OracleStream.upcoming); the session appends whole words, so the last one is whole."""
    from tandem.frontends.compact.ahead import voice_ahead

    def now(cache, frame):
        cache["pos"] = torch.tensor([frame + 1])  # the model has just stepped `frame`
        return cache

    st = _ahead_state()
    assert voice_ahead(now(_copy(_fed([START, IT, IS]), 1), 2), 0, st, IT, 64, settled=True) is None, \
        "what follows 'is' is not known"
    st = _ahead_state()
    assert voice_ahead(now(_copy(_fed([START, IT, IS]), 1), 2), 0, st, IT, 64, settled=True,
                       upcoming=(OS, LO, DOT)) == [IS, OS, LO, DOT]
    # the model reads on through the frames the upcoming tokens are fed at: nothing is voiced twice
    for frame, tok in ((3, IS), (4, OS), (5, LO), (6, DOT)):
        fed = [START, IT, IS, OS, LO, DOT, PAD][:frame + 1]
        assert voice_ahead(now(_fed(fed), frame), 0, st, tok, 64, settled=True, upcoming=()) is None
        assert st.voiced, tok
    st = _ahead_state()
    assert voice_ahead(now(_copy(_fed([START, IT, IS]), 1), 2), 0, st, IT, 64, settled=True,
                       upcoming=(OS, LO, DOT, WAS)) == [IS, OS, LO, DOT], "to the end of the clause"


def test_no_oracle_word_is_begun_more_often_than_the_oracle_fed_it():
    """Waiting for the oracle's next word, the pointer went back to the words just read: "It has 8 8 legs.",
    "William William Shakespeare" (a word of several pieces, which the one-piece repeat guard misses),
    "8 legs. 8 legs.". A word the oracle holds twice may be said twice, the model's own words are free, and a
    new oracle (its start token) is counted afresh."""
    from tandem.frontends.compact.decoding import CompactState

    word, other, own, rest = END + 3, END + 4, END + 6, END + 5  # word starts, and a piece that goes on a word
    st = CompactState.new(lambda text: [], starts_word=lambda t: t in (word, other, own))

    def said(tok: int) -> int:
        logp = torch.full((16,), -20.0)
        logp[tok] = 0.0
        return st.decide(logp - torch.logsumexp(logp, 0), vad_prob=0.02)

    for fed in (START, word, rest, other):
        st.fed(fed)
    assert [said(word), said(rest), said(word)] == [word, rest, PAD], "begun again: silence, the model waits"
    assert [said(other), said(word), said(own), said(rest), said(own)] == [other, PAD, own, rest, own]
    st.fed(word)  # the oracle says it again
    assert [said(word), said(rest), said(word)] == [word, rest, PAD]
    st.fed(START)  # a new oracle: a repair says its words again
    st.fed(word)
    assert said(word) == word
