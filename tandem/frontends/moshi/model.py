"""Moshi's LM with KAME's oracle stream: one more embedding added to the text embedding.

`OracleLMModel` subclasses `moshi.models.LMModel` and adds `oracle_emb`, an embedding table with
the text vocabulary plus one rows (the extra row is the text start token, which the oracle stream
pins at every reset). At the temporal transformer's input the oracle token's embedding is added to
the text token's embedding, exactly where KAME adds it; the depth transformer never sees it and
there is no oracle output head (REFERENCE 1.1). The parameter is named `oracle_emb` as in the
public KAME code (`src/kame/models/lm.py` builds it with the same factory as `text_emb`), so a
KAME state dict loads as it is; a plain Moshi state dict gets `oracle_emb` as a copy of `text_emb`.

How the addition is wired without copying moshi's code: a forward hook on `text_emb` adds
`oracle_emb(tokens)` to its output whenever oracle tokens are attached. `text_emb` is only called
from `forward_text` (the depth transformer has its own `depformer_text_emb`), so nothing else moves.
At run time the tokens live in one persistent [B, 1] tensor that the front-end updates in place
before every step (moshi's CUDA-graph wrapper replays captured kernels on fixed tensors, so the
tensor must never be replaced, and the hook must not branch on its values). In training, `forward`
takes the oracle sequence and aligns it like the text stream (start token first, shifted by one).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

import torch

from ._deps import require_moshi

require_moshi()

from moshi.models.lm import LMModel, LMOutput  # noqa: E402

ORACLE_PREFIX = "oracle_emb."
TEXT_PREFIX = "text_emb."


class OracleLMModel(LMModel):
    """`LMModel` plus the oracle stream. Constructor arguments are LMModel's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A copy of the text embedding: same class, size (text_card + 1), options (norm, low rank)
        # and initial weights, which is KAME's initialisation. deepcopy draws no random numbers, so a
        # model built with the same seed has the same weights as the plain LMModel everywhere else.
        self.oracle_emb = copy.deepcopy(self.text_emb)
        self._oracle_tokens: torch.Tensor | None = None
        self.text_emb.register_forward_hook(self._add_oracle)

    # -- the oracle input -------------------------------------------------------------------------
    def _add_oracle(self, module: torch.nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        tokens = self._oracle_tokens
        if tokens is None:
            return out
        emb = self.oracle_emb(tokens)
        if emb.shape[0] != out.shape[0]:  # classifier-free guidance doubles the batch
            emb = emb.repeat(out.shape[0] // emb.shape[0], 1, 1)
        return out + emb.to(out.dtype)

    def attach_oracle(self, tokens: torch.Tensor | None) -> None:
        """Streaming: `tokens` ([B, 1] long, on the model's device) is read at every step; update it
        in place (`copy_`). None detaches it (the model then behaves exactly like plain Moshi)."""
        if tokens is not None and (tokens.dim() != 2 or tokens.shape[1] != 1 or tokens.dtype != torch.long):
            raise ValueError(f"oracle tokens must be a [B, 1] long tensor, got {tuple(tokens.shape)} {tokens.dtype}")
        self._oracle_tokens = tokens

    def forward(self, codes: torch.Tensor, condition_tensors: Any = None,  # type: ignore[override]
                oracle_tokens: torch.Tensor | None = None) -> LMOutput:
        """Training forward. `oracle_tokens` is [B, T] or [B, 1, T] in the same column space as the
        text stream of `codes`: column t is fed with the input that predicts column t + 1, and the
        first input position gets the text start token (as KAME does)."""
        if oracle_tokens is None:
            return super().forward(codes, condition_tensors)
        if oracle_tokens.dim() == 3:
            oracle_tokens = oracle_tokens[:, 0]
        B, _, T = codes.shape
        if oracle_tokens.shape != (B, T):
            raise ValueError(f"oracle_tokens must be [B, T] = [{B}, {T}], got {tuple(oracle_tokens.shape)}")
        start = torch.full((B, 1), self.text_initial_token_id, dtype=torch.long, device=codes.device)
        aligned = torch.cat([start, oracle_tokens[:, :-1].to(codes.device)], dim=1)
        saved, self._oracle_tokens = self._oracle_tokens, aligned
        try:
            return super().forward(codes, condition_tensors)
        finally:
            self._oracle_tokens = saved


# -- state dicts --------------------------------------------------------------------------------
def has_oracle(state: Mapping[str, Any]) -> bool:
    return any(k.startswith(ORACLE_PREFIX) for k in state)


def backfill_oracle(state: dict[str, torch.Tensor]) -> bool:
    """A Moshi state dict has no oracle embedding: add one copied from the text embedding (every
    `text_emb.*` tensor, so norm or low-rank variants are copied too). Returns True if it did."""
    if has_oracle(state):
        return False
    text = {k: v for k, v in state.items() if k.startswith(TEXT_PREFIX)}
    if not text:
        raise KeyError("state dict has neither oracle_emb nor text_emb weights; is it a Moshi LM checkpoint?")
    for k, v in text.items():
        state[ORACLE_PREFIX + k[len(TEXT_PREFIX):]] = v.clone()
    return True


def build_lm(lm_kwargs: Mapping[str, Any], device: str | torch.device = "cpu",
             dtype: torch.dtype = torch.float32) -> OracleLMModel:
    """An OracleLMModel from a Moshi LM config (the dict in a Moshi/KAME config.json minus file names)."""
    kwargs = dict(lm_kwargs)
    for k in ("lora", "lora_rank", "lora_scaling", "depformer_causal"):
        kwargs.pop(k, None)  # LoRA is applied by the trainer; depformer_causal is deprecated in moshi
    if "demux_second_stream" in kwargs:
        kwargs["demux_second_text_stream"] = kwargs.pop("demux_second_stream")
    if "conditioners" in kwargs:
        from moshi.models.loaders import get_condition_fuser, get_conditioner_provider

        kwargs["condition_provider"] = get_conditioner_provider(kwargs["dim"], device, kwargs)
        del kwargs["conditioners"]
        if kwargs.get("fuser") is not None:
            kwargs["fuser"] = get_condition_fuser(kwargs)
    return OracleLMModel(device=device, dtype=dtype, **kwargs)


def load_lm(weights: str | Path | dict[str, torch.Tensor], lm_kwargs: Mapping[str, Any],
            device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> tuple[OracleLMModel, bool]:
    """Build the model and load a KAME or Moshi state dict (safetensors path or dict).

    Returns (model, backfilled): backfilled is True when the weights had no oracle embedding (a plain
    Moshi checkpoint) and it was copied from the text embedding. Loading is strict otherwise, so a
    checkpoint that does not fit the config fails here with the keys that differ.
    """
    def cast(k: str, v: torch.Tensor) -> torch.Tensor:
        if not v.dtype.is_floating_point:
            return v
        # moshi keeps condition providers in float32 whatever the model's dtype
        return v.float() if k.startswith(("condition_provider.", "fuser.")) else v.to(dtype)

    if isinstance(weights, (str, Path)):
        from safetensors import safe_open

        # tensor by tensor, cast as read: the public KAME checkpoint is float32 (about 32 GB), and
        # loading it whole before casting would need twice the host memory of the bf16 model
        state = {}
        with safe_open(str(weights), framework="pt", device="cpu") as f:
            for k in f.keys():
                state[k] = cast(k, f.get_tensor(k))
    else:
        state = {k: cast(k, v) for k, v in weights.items()}
    backfilled = backfill_oracle(state)
    model = build_lm(lm_kwargs, device="meta", dtype=dtype)
    try:
        res = model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as e:  # shape mismatches: the weights are for another size of model
        detail = " ".join(line.strip() for line in str(e).splitlines()[1:4])
        raise ValueError(f"the LM weights do not fit the LM config: {detail}") from e
    if res.missing_keys or res.unexpected_keys:
        def few(keys: list[str]) -> str:
            return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        raise ValueError("the LM weights do not fit the LM config: "
                         + "; ".join(f"{what}: {few(keys)}" for what, keys in
                                     (("missing", res.missing_keys), ("unexpected", res.unexpected_keys)) if keys))
    model = model.to(device)
    model.eval()
    return model, backfilled
