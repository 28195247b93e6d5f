"""The compact front-end's checkpoint file: model config, float16 weights, the SentencePiece model
and a free-form record of how it was made. Run time loads it; training writes it."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from .model import CompactConfig, CompactLM
from .tokenizer import CompactTokenizer


def save_checkpoint(path: Path, model: CompactLM, tok: CompactTokenizer, meta: dict) -> None:
    state = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    torch.save({"config": model.c.to_dict(), "state": state, "tokenizer": tok.proto, "meta": meta}, path)


def load_checkpoint(path: Path, pointer_follow: bool | None = None) -> tuple[CompactLM, CompactTokenizer, dict]:
    """`pointer_follow=True` turns the pointer bonus on for a checkpoint trained without it (to
    continue training it); its two weights start at their initial values."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    config = CompactConfig(**ck["config"])
    if pointer_follow is not None:
        config = replace(config, pointer_follow=pointer_follow)
    model = CompactLM(config)
    state = {k: v.float() if v.is_floating_point() else v for k, v in ck["state"].items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"follow_w"}:
        raise ValueError(f"{path}: checkpoint does not match the model (missing {missing}, unexpected {unexpected})")
    return model.eval(), CompactTokenizer(ck["tokenizer"]), ck.get("meta", {})
