"""`tandem train compact`: tokenizer, synthetic data and training of the compact front-end on a CPU.

Fixed seed, progress bar, held-out loss, a loss-curve plot and one checkpoint file (model weights,
config and the SentencePiece model) small enough to ship in the repository.
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ...frontends.compact.checkpoint import load_checkpoint, save_checkpoint
from ...frontends.compact.lexicon import english_words
from ...frontends.compact.model import CompactConfig, CompactLM
from ...frontends.compact.repair import REPAIR
from ...frontends.compact.tokenizer import PAD, CompactTokenizer
from ...speak.openers import FALLBACKS, OPENERS
from ..synth import make_dialogue
from .data import LATE_START_P, TALK_OVER_P, build_compact_example, vad_buckets

PAD_WEIGHT = 0.5  # KAME's text padding weight
POINTER_WEIGHT = 0.3  # the copy pointer's own loss: point at the very frame the teacher copied


@dataclass
class TrainConfig:
    minutes: float = 45.0
    max_steps: int = 100_000
    steps: int | None = None  # plan the schedule over this many steps instead of over the time budget
    init: Path | None = None  # continue from this checkpoint (its tokenizer and weights) instead of from scratch
    batch: int = 24
    seq: int = 256
    lr: float = 3e-3
    warmup: int = 150
    seed: int = 1234
    model: CompactConfig = field(default_factory=lambda: CompactConfig(pointer_follow=True))  # vocab: the tokenizer's
    eval_every: int = 100
    eval_batches: int = 4


def train_tokenizer(rng: random.Random, vocab: int) -> CompactTokenizer:
    sents: list[str] = []
    for _ in range(8000):
        d = make_dialogue(rng, heldout=False)
        for t in d.turns:
            sents.append(" ".join(w.text for w in t.words))
            sents.append(t.reply)
    words = english_words()
    rng.shuffle(words)
    sents += [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
    sents += OPENERS + FALLBACKS + [REPAIR]
    return CompactTokenizer.from_sentences(sents, vocab)


def make_batch(rng: random.Random, tok: CompactTokenizer, n: int, seq: int, heldout: bool = False
               ) -> tuple[torch.Tensor, ...]:
    user = np.zeros((n, seq, 2), np.int64)
    vad = np.zeros((n, seq), np.int64)
    oracle = np.zeros((n, seq), np.int64)
    target = np.zeros((n, seq), np.int64)
    mask = np.zeros((n, seq), np.float32)
    src = np.full((n, seq), -1, np.int64)
    for b in range(n):
        ex = build_compact_example(rng, tok, heldout=heldout, late_start_p=LATE_START_P, talk_over_p=TALK_OVER_P)
        L = len(ex.target)
        s = rng.randrange(0, L - seq + 1) if L > seq else 0
        e = min(L, s + seq)
        k = e - s
        user[b, :k] = ex.user[s:e]
        vad[b, :k] = vad_buckets(ex.vad[s:e])
        oracle[b, :k] = ex.oracle[s:e]
        target[b, :k] = ex.target[s:e]
        mask[b, :k] = 1.0 if ex.weight is None else ex.weight[s:e]
        if ex.src is not None:
            rel = ex.src[s:e] - s
            src[b, :k] = np.where((ex.src[s:e] >= 0) & (rel >= 0), rel, -1)
    prev = np.concatenate([np.zeros((n, 1), np.int64), target[:, :-1]], axis=1)
    t = torch.from_numpy
    return t(user), t(vad), t(oracle), t(prev), t(target), t(mask), t(src), t(last_copied(src))


def last_copied(src: np.ndarray) -> np.ndarray:
    """[B,T] source frames of copied targets -> the source of the latest copy strictly before each frame."""
    out = np.full_like(src, -1)
    for b in range(src.shape[0]):
        last = -1
        for f in range(src.shape[1]):
            out[b, f] = last
            if src[b, f] >= 0:
                last = src[b, f]
    return out


def loss_of(model: CompactLM, batch) -> tuple[torch.Tensor, float]:
    user, vad, oracle, prev, target, mask, src, last_src = batch
    logp, attn = model(user, vad, oracle, prev, last_src=last_src, return_attn=True)
    nll = F.nll_loss(logp.transpose(1, 2), target, reduction="none")
    w = mask * torch.where(target == PAD, PAD_WEIGHT, 1.0)
    loss = (nll * w).sum() / w.sum()
    copied = src >= 0
    if attn is not None and bool(copied.any()):
        p_src = attn.gather(2, src.clamp_min(0)[..., None])[..., 0]
        loss = loss + POINTER_WEIGHT * -torch.log(p_src[copied].clamp_min(1e-6)).mean()
    speech = mask * (target != PAD)
    speech_nll = float((nll.detach() * speech).sum() / speech.sum().clamp_min(1))
    return loss, speech_nll


def train_compact(cfg: TrainConfig, out: Path, progress: bool = True) -> dict:
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    t0 = time.time()
    if cfg.init is not None:
        model, tok, init_meta = load_checkpoint(cfg.init, pointer_follow=cfg.model.pointer_follow)
    else:
        tok = train_tokenizer(random.Random(cfg.seed + 1), cfg.model.vocab)
        model = CompactLM(replace(cfg.model, vocab=tok.vocab_size))
        init_meta = None
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.05, betas=(0.9, 0.98))
    eval_rng = random.Random(cfg.seed + 2)
    eval_batches = [make_batch(eval_rng, tok, cfg.batch, cfg.seq, heldout=True) for _ in range(cfg.eval_batches)]
    budget = cfg.minutes * 60
    history = {"step": [], "train": [], "eval_step": [], "eval": [], "eval_speech": []}
    # the schedule is laid over the time budget: estimate steps from the first ones
    est_steps = min(cfg.steps, cfg.max_steps) if cfg.steps else cfg.max_steps
    bar = tqdm(total=est_steps, desc="train compact", unit="step", disable=not progress)
    step = 0
    t_train = time.time()
    while step < cfg.max_steps and time.time() - t0 < budget:
        if step == 20 and not cfg.steps:
            per = (time.time() - t_train) / 20
            est_steps = min(cfg.max_steps, int((budget - (time.time() - t0)) / per) + 20)
            bar.total = est_steps
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, est_steps)))))
        for g in opt.param_groups:
            g["lr"] = lr
        model.train()
        loss, _ = loss_of(model, make_batch(rng, tok, cfg.batch, cfg.seq))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        history["step"].append(step)
        history["train"].append(round(float(loss.detach()), 4))
        if step % cfg.eval_every == 0 or step == 1:
            model.eval()
            with torch.no_grad():
                ev = [loss_of(model, b) for b in eval_batches]
            history["eval_step"].append(step)
            history["eval"].append(round(float(np.mean([float(e[0]) for e in ev])), 4))
            history["eval_speech"].append(round(float(np.mean([e[1] for e in ev])), 4))
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", heldout=history["eval"][-1], speech=history["eval_speech"][-1])
        bar.update(1)
        if step % 500 == 0:  # a run cut short still leaves a usable checkpoint
            save_checkpoint(out / "compact.pt", model, tok, {"steps": step, "partial": True, "seed": cfg.seed})
        if step >= est_steps:
            break
    bar.close()
    meta = {"steps": step, "minutes": round((time.time() - t0) / 60, 2), "seed": cfg.seed,
            "config": {**asdict(cfg), "init": str(cfg.init) if cfg.init else None},
            "init_meta": init_meta,
            "final_heldout_loss": history["eval"][-1] if history["eval"] else None,
            "params": sum(p.numel() for p in model.parameters())}
    save_checkpoint(out / "compact.pt", model, tok, meta)
    (out / "history.json").write_text(json.dumps(history))
    plot_history(history, out / "loss.png")
    return meta


def plot_history(h: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    tr = np.array(h["train"])
    if len(tr) > 20:
        k = 20
        ax.plot(h["step"][k - 1:], np.convolve(tr, np.ones(k) / k, mode="valid"), label="train (20-step mean)")
    else:
        ax.plot(h["step"], tr, label="train")
    ax.plot(h["eval_step"], h["eval"], "o-", label="held-out")
    ax.plot(h["eval_step"], h["eval_speech"], "s--", label="held-out, speech tokens only")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
