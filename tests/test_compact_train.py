"""A short training run on a tiny config finishes, lowers the loss and writes a loadable checkpoint."""
import json

import numpy as np
import torch

from tandem.speak.frontend import UserFrame
from tandem.frontends.compact.frontend import CompactFrontEnd
from tandem.frontends.compact.model import CompactConfig
from tandem.frontends.compact.checkpoint import load_checkpoint
from tandem.train.compact.train import TrainConfig, train_compact


def tiny_cfg(steps: int) -> TrainConfig:
    return TrainConfig(minutes=5, max_steps=steps, batch=6, seq=96,
                       model=CompactConfig(vocab=400, d=32, layers=1, heads=2, window=64, pointer_follow=True),
                       eval_every=10, eval_batches=1, warmup=5, lr=5e-3)


def test_tiny_training_lowers_the_loss_and_checkpoints(tmp_path):
    torch.set_num_threads(1)
    meta = train_compact(tiny_cfg(60), tmp_path, progress=False)
    hist = json.loads((tmp_path / "history.json").read_text())
    first, last = np.mean(hist["train"][:10]), np.mean(hist["train"][-10:])
    assert last < 0.6 * first, (first, last)
    assert hist["eval"][-1] < hist["eval"][0]
    ck = tmp_path / "compact.pt"
    assert ck.stat().st_size < 30 * 2**20
    assert (tmp_path / "loss.png").stat().st_size > 5000
    model, tok, m = load_checkpoint(ck)
    assert m["steps"] == meta["steps"] == 60

    def run() -> list[int]:
        fe = CompactFrontEnd(ck)
        audio = np.zeros(1920, np.float32)
        for k in range(40):
            fe.step(UserFrame(audio, 0.9 if k < 20 else 0.0, k < 20, transcript="what is the capital" if k > 5 else ""),
                    2 if k == 22 else (tok.encode(" Paris")[0] if k == 23 else 0))
        return list(fe.emitted)

    assert run() == run(), "stepping is deterministic"


def test_training_is_reproducible_with_a_seed(tmp_path):
    torch.set_num_threads(1)
    train_compact(tiny_cfg(5), tmp_path / "a", progress=False)
    train_compact(tiny_cfg(5), tmp_path / "b", progress=False)
    a = json.loads((tmp_path / "a" / "history.json").read_text())["train"]
    b = json.loads((tmp_path / "b" / "history.json").read_text())["train"]
    assert a == b


def test_continuing_from_a_checkpoint_keeps_its_tokenizer_and_weights(tmp_path):
    torch.set_num_threads(1)
    train_compact(tiny_cfg(3), tmp_path / "a", progress=False)
    base, tok, _ = load_checkpoint(tmp_path / "a" / "compact.pt")
    cfg = tiny_cfg(2)
    cfg.init = tmp_path / "a" / "compact.pt"
    meta = train_compact(cfg, tmp_path / "b", progress=False)
    cont, tok2, m = load_checkpoint(tmp_path / "b" / "compact.pt")
    assert tok2.proto == tok.proto
    assert m["init_meta"]["steps"] == 3 and meta["steps"] == 2
    assert cont.c == base.c


def test_an_old_checkpoint_gains_the_pointer_bonus_when_asked(tmp_path):
    cfg = tiny_cfg(1)
    cfg.model = CompactConfig(vocab=400, d=32, layers=1, heads=2, window=64, pointer_follow=False)
    train_compact(cfg, tmp_path, progress=False)
    m, _, _ = load_checkpoint(tmp_path / "compact.pt", pointer_follow=True)
    assert m.c.pointer_follow and m.follow_w.shape == (2,)
