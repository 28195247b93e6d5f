"""Tiny random Moshi checkpoints for tests and dry runs on a CPU (no downloads).

The LM and Mimi keep the real shapes' structure (text + dep_q assistant codebooks + dep_q user
codebooks, acoustic delay 1, 24 kHz audio at 12.5 Hz) with small widths, built from constructor
arguments only. The SentencePiece model is trained on the synthetic dialogue text with Moshi's
special ids (0 end-of-padding/unk, 3 PAD), so ids line up with the real tokenizer's conventions.
"""
from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import torch

TINY_DEP_Q = 3
TINY_CARD = 32


def tiny_lm_kwargs(text_card: int, dim: int = 32, layers: int = 2) -> dict[str, Any]:
    """Moshi LM constructor arguments: n_q = 2 * dep_q, one delay per stream (text first)."""
    return {
        "dim": dim, "text_card": text_card, "existing_text_padding_id": 3, "n_q": 2 * TINY_DEP_Q,
        "dep_q": TINY_DEP_Q, "card": TINY_CARD, "num_heads": 2, "num_layers": layers, "hidden_scale": 2,
        "causal": True, "layer_scale": None, "context": 200, "max_period": 10000, "gating": "silu",
        "norm": "rms_norm_f32", "positional_embedding": "rope", "depformer_dim": 16,
        "depformer_dim_feedforward": 32, "depformer_num_heads": 2, "depformer_num_layers": 1,
        "depformer_layer_scale": None, "depformer_multi_linear": True, "depformer_context": TINY_DEP_Q,
        "depformer_max_period": 10000, "depformer_gating": "silu", "depformer_pos_emb": "none",
        "depformer_weights_per_step": True, "delays": [0] + [0] + [1] * (TINY_DEP_Q - 1) + [0] + [1] * (TINY_DEP_Q - 1),
    }


def tiny_mimi_config() -> dict[str, Any]:
    """moshi's Mimi config format (seanet / quantizer / transformer), 24 kHz -> 12.5 Hz, 32 bins."""
    seanet = {"channels": 1, "dimension": 32, "causal": True, "n_filters": 4, "n_residual_layers": 1,
              "activation": "ELU", "compress": 2, "dilation_base": 2, "disable_norm_outer_blocks": 0,
              "kernel_size": 7, "residual_kernel_size": 3, "last_kernel_size": 3, "norm": "none",
              "pad_mode": "constant", "ratios": [8, 6, 5, 4], "true_skip": True}
    return {
        "sample_rate": 24000, "channels": 1, "frame_rate": 12.5, "seanet": seanet,
        "quantizer": {"dimension": 16, "n_q": 4, "bins": TINY_CARD, "input_dimension": 32, "output_dimension": 32},
        "transformer": {"d_model": 32, "num_heads": 2, "num_layers": 1, "causal": True, "layer_scale": 0.01,
                        "context": 250, "conv_layout": True, "max_period": 10000, "gating": "none",
                        "norm": "layer_norm", "positional_embedding": "rope", "dim_feedforward": 64,
                        "input_dimension": 32, "output_dimensions": [32]},
    }


def init_random_codebooks(mimi: Any) -> Any:
    """Random Mimi codebooks (moshi's start all-zero, so every frame would encode to code 0)."""
    from moshi.quantization.core_vq import EuclideanCodebook

    for m in mimi.modules():
        if isinstance(m, EuclideanCodebook):
            m.embedding_sum.normal_()
            m._initialized.fill_(1.0)
            m.register_buffer("_embedding", None, persistent=False)
    return mimi


def tiny_mimi(seed: int = 0) -> Any:
    """A random tiny Mimi with initialised codebooks."""
    from moshi.models.loaders import get_mimi

    torch.manual_seed(seed)
    return init_random_codebooks(get_mimi(None, tiny_mimi_config(), device="cpu", num_codebooks=TINY_DEP_Q))


def train_tiny_sentencepiece(path: Path, vocab: int = 120, seed: int = 0, n_dialogues: int = 400) -> Path:
    """A small SentencePiece model on synthetic dialogue text, with Moshi's special ids."""
    import sentencepiece as spm

    from ...train.synth import make_dialogue

    rng = random.Random(seed)
    lines = []
    for _ in range(n_dialogues):
        d = make_dialogue(rng)
        for t in d.turns:
            lines += [t.text, t.reply]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, vocab_size=vocab,
                                   model_type="unigram", character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2,
                                   pad_id=3, minloglevel=2, num_threads=1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def write_tiny_checkpoint(out_dir: str | Path, seed: int = 0, vocab: int = 120, plain_moshi: bool = False) -> Path:
    """A complete checkpoint directory (config, LM, Mimi, tokenizer) with random weights.
    plain_moshi=True writes the LM as a plain Moshi checkpoint (no oracle_emb)."""
    from safetensors.torch import save_file

    from . import checkpoint
    from .model import build_lm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sp = train_tiny_sentencepiece(out / "tokenizer.model", vocab=vocab, seed=seed)
    mimi = tiny_mimi(seed)
    save_file({k: v.contiguous() for k, v in mimi.state_dict().items()}, str(out / "mimi.safetensors"))
    torch.manual_seed(seed)
    kwargs = tiny_lm_kwargs(text_card=vocab)
    lm = build_lm(kwargs)
    checkpoint.save(out, lm, kwargs, out / "mimi.safetensors", sp, mimi_config=tiny_mimi_config())
    if plain_moshi:
        from safetensors.torch import load_file

        state = {k: v for k, v in load_file(str(out / checkpoint.LM_NAME)).items() if not k.startswith("oracle_emb.")}
        save_file(state, str(out / checkpoint.LM_NAME))
    return out
