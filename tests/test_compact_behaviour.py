"""The shipped compact checkpoint: loads offline from the repository and shows the trained
behaviours on a small fixed held-out set (loose thresholds; the real figures are in docs/COMPACT.md)."""
import pytest
import torch

from tandem.frontends.compact.evaluate import evaluate
from tandem.frontends.compact.frontend import DEFAULT_CHECKPOINT
from tandem.frontends.compact.train import load_checkpoint


@pytest.fixture(scope="module")
def shipped():
    assert DEFAULT_CHECKPOINT.exists(), "the trained checkpoint ships in the repository"
    assert DEFAULT_CHECKPOINT.stat().st_size < 30 * 2**20
    torch.set_num_threads(1)
    return load_checkpoint(DEFAULT_CHECKPOINT)


def test_shipped_checkpoint_behaves(shipped):
    model, tok, meta = shipped
    r = evaluate(model, tok, n=24, seed=7)
    assert r["talk_over_pct"] < 10
    assert r["onset_within_4_frames_pct"] >= 70
    assert r["oracle_answer_pct"] >= 60
    assert r["replaced_newer_answer_pct"] >= 40
    assert r["no_oracle_nonempty_pct"] >= 70
    assert r["no_oracle_stops_pct"] >= 70
    assert r["missed_turn_recovery_pct"] >= 70, "held silent past its moment, it still takes the turn"
