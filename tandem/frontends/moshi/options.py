"""Command-line options of the moshi front-end, shared by `tandem run`, `bench` and `serve`.

Light on purpose (no torch, no moshi): the CLI builds its parser in every command.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_HF_REPO = "SakanaAI/kame"  # the same as checkpoint.DEFAULT_HF_REPO, without importing torch


def add_cli_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("moshi front-end (--front-end moshi)")
    g.add_argument("--moshi-weights", type=Path, default=None, metavar="DIR",
                   help="local checkpoint directory: config.json, LM safetensors (KAME or Moshi), Mimi, tokenizer")
    g.add_argument("--hf-repo", default=None, metavar="REPO",
                   help=f"Hugging Face repo to fetch the checkpoint from when the hub is reachable (default {DEFAULT_HF_REPO})")
    g.add_argument("--moshi-device", default=None, help="cuda or cpu (default: cuda when available)")
    g.add_argument("--moshi-dtype", default=None, choices=["auto", "bf16", "fp16", "fp32"],
                   help="LM dtype (default: bf16 on cuda, fp32 on cpu; Mimi stays fp32)")
    g.add_argument("--moshi-seed", type=int, default=None, help="sampling seed (reproducible runs)")


def kwargs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """front_end_kwargs for the moshi factory, only the options that were given."""
    kw: dict[str, Any] = {}
    for opt, key in (("moshi_weights", "moshi_weights"), ("hf_repo", "hf_repo"), ("moshi_device", "device"),
                     ("moshi_dtype", "dtype"), ("moshi_seed", "seed")):
        v = getattr(args, opt, None)
        if v is not None:
            kw[key] = v
    return kw


ENV = {"moshi_weights": "TANDEM_MOSHI_WEIGHTS", "hf_repo": "TANDEM_MOSHI_HF_REPO", "device": "TANDEM_MOSHI_DEVICE",
       "dtype": "TANDEM_MOSHI_DTYPE", "seed": "TANDEM_MOSHI_SEED"}


def export_env(args: argparse.Namespace) -> None:
    """For commands that build front-ends by name only (bench): pass the options through the
    environment, which the moshi factory reads for anything not given as a keyword."""
    import os

    for key, value in kwargs_from_args(args).items():
        os.environ[ENV[key]] = str(value)


def env_defaults() -> dict[str, Any]:
    import os

    kw: dict[str, Any] = {k: os.environ[v] for k, v in ENV.items() if os.environ.get(v)}
    if "seed" in kw:
        kw["seed"] = int(kw["seed"])
    return kw


def add_train_args(p: argparse.ArgumentParser) -> None:
    """`tandem train moshi` options (the base checkpoint comes from the moshi front-end options).

    `tandem train` serves every front-end: an option another trainer already defines (--lr, say)
    is shared rather than defined twice; unset, each trainer applies its own default."""
    add_cli_args(p)
    g = p.add_argument_group("tandem train moshi")

    def opt(*names: str, **kw: Any) -> None:
        try:
            g.add_argument(*names, **kw)
        except argparse.ArgumentError:
            pass  # already defined by another front-end's trainer: shared

    opt("--data", type=Path, default=None, help="training shards directory (default OUT/data; made "
        "from synthetic dialogues when it has none)")
    opt("--synthesize", type=int, default=None, metavar="N", help="make N synthetic dialogues into --data")
    opt("--manifest", type=Path, default=None,
        help="JSONL of real two-channel dialogues with word timestamps, made into --data")
    opt("--voices", choices=["tts", "tone"], default="tts",
        help="how synthetic dialogues are voiced: test voice + hibari, or tones (dry runs)")
    opt("--lora", action="store_true", help="moshi: train LoRA adapters + the oracle embedding only")
    opt("--lora-rank", type=int, default=64)
    opt("--lr", type=float, default=None, help="learning rate (moshi default 3e-5, KAME's)")
    opt("--batch-size", type=int, default=None)
    opt("--frames", type=int, default=None, help="moshi: window length in 80 ms frames (default 250)")
    opt("--gradient-checkpointing", action="store_true",
        help="moshi: recompute activations in the backward pass (less GPU memory, about 30%% slower)")
    opt("--mixed-precision", action="store_true",
        help="moshi: trained weights and optimizer state in fp32, compute in bf16 (with --lora the frozen "
             "base stays bf16; without, the whole model is fp32)")
