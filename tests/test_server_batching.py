"""The compact front-end shared by many live sessions: one model, one batched step per frame, each
session exactly as if it ran alone."""
from __future__ import annotations

import numpy as np
import pytest

from tandem.speak.frontend import UserFrame
from tandem.frontends.compact.frontend import CompactFrontEnd, CompactPool
from tandem.frontends.compact.tokenizer import PAD

SILENCE = np.zeros(1920, np.float32)
QUESTIONS = ["what is the capital of france", "who wrote hamlet", "how many legs does a spider have"]


def user_at(i: int, k: int) -> UserFrame:
    words = QUESTIONS[i % len(QUESTIONS)].split()
    speaking = k < 25 + 3 * i
    return UserFrame(SILENCE, 0.9 if speaking else 0.0, speaking, " ".join(words[: min(len(words), k // 4)]))


def oracle_at(pool_tok, k: int, i: int) -> int:  # noqa: ANN001
    """A start token a little after the turn, then some content tokens (the same scheme for both runs)."""
    start = 30 + 3 * i
    if k == start:
        return pool_tok.start_id
    ids = pool_tok.encode(" the answer is paris")
    return ids[k - start - 1] if start < k <= start + len(ids) else PAD


def test_batched_steps_match_sessions_stepped_alone_even_with_churn():
    pool = CompactPool(capacity=4)
    lanes = [pool.open() for _ in range(3)]
    alone = [CompactFrontEnd() for _ in range(3)]
    tok = pool.tokenizer
    started = [0, 0, 0]
    got_b: list[list[int]] = [[], [], []]
    got_a: list[list[int]] = [[], [], []]
    for k in range(110):
        if k == 60:  # a session leaves and a new one takes its row: the gather/scatter path, then packed again
            lanes[1].close()
            alone[1] = CompactFrontEnd()
            started[1] = k
            assert pool.in_use == 2
            lanes[1] = pool.open()
            assert lanes[1].slot == 1, "the lowest free row is reused"
        users = [user_at(i, k - started[i]) for i in range(3)]
        otoks = [oracle_at(tok, k - started[i], i) for i in range(3)]
        if k == 61:  # only some sessions stepped this frame: rows are gathered and scattered back
            outs = pool.step_many(lanes[:2], users[:2], otoks[:2]) + [lanes[2].step(users[2], otoks[2])]
        else:
            outs = pool.step_many(lanes, users, otoks)
        assert len(outs) == 3
        for i in range(3):
            alone[i].step(users[i], otoks[i])
            got_b[i].append(lanes[i].prev)
            got_a[i].append(alone[i].prev)
    assert got_b == got_a
    assert any(t != PAD for seq in got_b for t in seq), "the model said something"


def test_pool_refuses_more_sessions_than_rows_and_reuses_freed_rows():
    pool = CompactPool(capacity=2)
    assert pool.in_use == 0, "the warm-up step at start gave its row back"
    a, b = pool.open(), pool.open()
    with pytest.raises(RuntimeError, match="in use"):
        pool.open()
    a.close()
    c = pool.open()
    assert c.slot == 0 and pool.in_use == 2
    with pytest.raises(ValueError, match="once per frame"):
        pool.step_many([b, b], [user_at(0, 0)] * 2, [PAD, PAD])
