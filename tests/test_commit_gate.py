"""Before its answer settles, a reply says only words it cannot have to take back (frontends/compact/commit.py)."""
import math

import torch

from tandem.frontends.compact.commit import MAX_COMMIT_WAIT_FRAMES, CommitGate, restatable
from tandem.frontends.compact.decoding import CompactState
from tandem.frontends.compact.tokenizer import END, PAD, START

WORDS = ["It", "is", "not", "Buenos", "capital", "cap", "I", "2", "The", "In", "1945,", ",", "-", " "]
IDS = {w: END + 1 + i for i, w in enumerate(WORDS)}
TEXT = {i: w for w, i in IDS.items()}


def gate() -> CommitGate:
    return CommitGate(lambda t: TEXT[t])


def test_openings_and_the_users_own_words_are_safe_and_facts_are_not():
    g = gate()
    question = "What is the capital of Argentina?"
    assert [w for w in WORDS if g.safe(IDS[w], question)] == ["It", "is", "capital", "cap", "The", ","]
    assert g.safe(IDS["2"], "What is two plus two?"), "a number restated in its spoken form"
    assert not g.safe(IDS["-"], question) and not g.safe(IDS[" "], question), 'a sign, or a bare space, begins "-40"'
    assert not g.safe(IDS["In"], "In what year did World War II end?"), "the question's frame is not restated"
    assert "i'm" not in restatable("I'm asking what I should do") and "asking" in restatable("I'm asking")


def test_it_waits_only_while_an_answer_is_fed_and_not_settled_and_not_for_ever():
    g = gate()
    q = "What is the capital of Argentina?"
    assert not g.holds(IDS["Buenos"], q, settled=True, answer_fed=True)
    assert not g.holds(IDS["Buenos"], q, settled=False, answer_fed=False), "no answer yet: the model's own words"
    assert [g.holds(IDS["Buenos"], q, settled=False, answer_fed=True) for _ in range(MAX_COMMIT_WAIT_FRAMES + 2)] \
        == [True] * MAX_COMMIT_WAIT_FRAMES + [False, False], "a stream that never settles does not silence the reply"
    assert g.holds_total == MAX_COMMIT_WAIT_FRAMES
    assert not g.holds(IDS["Buenos"], q, settled=True, answer_fed=True) and g.waited == 0


def wants(word: str) -> torch.Tensor:
    lp = torch.full((END + 1 + len(WORDS),), -20.0)
    lp[PAD], lp[IDS[word]] = math.log(0.2), math.log(0.8)
    return lp - torch.logsumexp(lp, 0)


def test_a_reply_says_its_opening_then_waits_for_the_settled_answer():
    st = CompactState.new(lambda text: [], starts_word=lambda t: t in TEXT)
    st.commit = gate()
    st.hear("What is the capital of Argentina?")
    st.turn_start.choose(wants("It"), vad_prob=0.9)  # the user spoke
    for fed in (START, IDS["It"], IDS["is"], IDS["not"]):
        st.fed(fed)
    said = [st.decide(wants(w), vad_prob=0.05) for w in ("It", "is", "not", "not", "not")]
    assert said == [IDS["It"], IDS["is"], PAD, PAD, PAD], "the unsettled answer's fact waits"
    assert st.decide(wants("Buenos"), vad_prob=0.05, settled=True) == IDS["Buenos"]


def test_a_turn_not_yet_taken_stays_to_take_while_the_word_waits():
    st = CompactState.new(lambda text: [], starts_word=lambda t: t in TEXT)
    st.commit = gate()
    st.hear("What colour do you get by mixing blue and yellow?")
    st.turn_start.choose(wants("I"), vad_prob=0.9)
    for fed in (START, IDS["I"]):
        st.fed(fed)
    assert [st.decide(wants("I"), vad_prob=0.05) for _ in range(3)] == [PAD] * 3, '"I\'m" commits to a kind of reply'
    assert st.turn_start.armed, "the turn is still the model's to take"
    st.fed(START)  # the answer to the final: "The answer is green."
    st.fed(IDS["The"])
    st.answer_waiting = True
    assert st.decide(wants("I"), vad_prob=0.05, settled=True, opening=IDS["The"]) == IDS["The"], \
        "a settled answer's reply begins where the answer does"


def test_a_withdrawn_reply_leaves_nothing_to_repair():
    st = CompactState.new(lambda text: [], starts_word=lambda t: t in TEXT, repair_ids=[IDS[","]])
    st.repair.said(IDS["It"], began_reply=True)
    st.repair.said(IDS["not"], began_reply=False)
    st.repair.due = [IDS[","]]
    st.cursor = 3
    st.withdrawn()
    assert st.hushed and st.cursor is None
    assert st.repair.reply == [] and st.repair.due == [] and st.repair.next_token() is None



def fed_cache(tokens: list[int]) -> dict[str, torch.Tensor]:
    """A model cache's record of the oracle tokens fed, one a frame from frame 0 (the stream's START)."""
    n = len(tokens)
    return {"reset_pos": torch.tensor([0]), "pos": torch.tensor([n]), "slot_pos": torch.arange(n)[None],
            "oracle": torch.tensor(tokens)[None]}


def test_a_held_reply_goes_on_with_the_settled_answers_next_word():
    from tandem.frontends.compact.decoding import resume_piece

    st = CompactState.new(lambda text: [], starts_word=lambda t: t in TEXT)
    st.said = [IDS["It"], IDS["is"]]
    settled = fed_cache([START, IDS["It"], PAD, IDS["is"], IDS["Buenos"], PAD])
    assert resume_piece(settled, 0, st, 64) == (4, IDS["Buenos"]), "the word after what was said, and its frame"
    assert resume_piece(fed_cache([START, IDS["The"], IDS["Buenos"]]), 0, st, 64) is None, "another opening: the repair's"
    assert resume_piece(fed_cache([START, IDS["It"], IDS["is"]]), 0, st, 64) is None, "the next word not fed yet"
    st.said = []
    assert resume_piece(settled, 0, st, 64) is None, "nothing said: the turn's opening rule, not this"


def test_a_sorry_nothing_calls_for_is_not_said():
    """The newer oracle goes on from what was said ("It was invented" of "It was invented by Thomas Edison."):
    the model's own "sorry," would be a stumble; a newer one that contradicts it still gets the repair."""
    from tandem.frontends.compact.repair import RepairWatch

    sorry = [IDS[","]]
    w = RepairWatch(sorry)
    for t in (START, IDS["It"], IDS["is"], IDS["not"]):
        w.fed(t)
    w.said(IDS["It"], began_reply=True)
    w.said(IDS["is"], began_reply=False)
    for t in (START, IDS["It"], IDS["is"], IDS["Buenos"]):
        w.fed(t)
    assert w.agreed and w.needless(IDS[","]) and not w.needless(IDS["Buenos"])
    w.fed(START)
    assert not w.agreed, "a newer stream is judged afresh"
    for t in (IDS["The"], IDS["Buenos"]):
        w.fed(t)
    assert w.due == sorry and not w.needless(IDS[","]), "a clash is repaired"
