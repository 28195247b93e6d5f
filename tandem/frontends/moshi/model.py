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
import logging
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from ._deps import require_moshi

require_moshi()

from moshi.models.lm import LMModel, LMOutput  # noqa: E402

log = logging.getLogger(__name__)
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


SAFETENSORS_SUFFIXES = (".safetensors", ".sft", ".sfts")  # moshi's `_is_safetensors`
# where trainers nest a state dict in a torch pickle: moshi's own {"fsdp_best_state": {"model": ...}},
# and the common {"model": ...} / {"state_dict": ...} / {"module": ...}
NESTING_KEYS = ("fsdp_best_state", "model", "state_dict", "module")
# kame_finetune's training model (MoshiForFinetuning) keeps gating weights as plain parameters for
# DeepSpeed ZeRO-3 (`...gating.linear_in_weight`); its export renames them back, its init dir does not
EXPOSED = re.compile(r"(\.gating(?:\.\d+)?)\.linear_(in|out)_weight$")


def read_state(path: str | Path, cast: Callable[[str, torch.Tensor], torch.Tensor] = lambda k, v: v
               ) -> dict[str, torch.Tensor]:
    """A state dict from a safetensors file or a torch pickle (`.pt`), each tensor passed through
    `cast` as it is read."""
    path = Path(path)
    if path.suffix in SAFETENSORS_SUFFIXES:
        from safetensors import safe_open

        # tensor by tensor, cast as read: the public KAME checkpoint is float32 (about 32 GB), and
        # loading it whole before casting would need twice the host memory of the bf16 model
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return {k: cast(k, f.get_tensor(k)) for k in f.keys()}
    import pickle

    try:
        try:  # memory-mapped, for the same reason; files in torch's legacy format cannot be
            obj: Any = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # weights_only: a pickle of objects, not of tensors
        raise ValueError(f"{path.name} is not a plain torch state dict ({str(e).splitlines()[0]})") from e
    while isinstance(obj, Mapping) and not all(isinstance(v, torch.Tensor) for v in obj.values()):
        key = next((k for k in NESTING_KEYS if isinstance(obj.get(k), Mapping)), None)
        if key is None:
            raise ValueError(f"{path.name} holds no state dict (top-level keys: {', '.join(map(str, list(obj)[:8]))})")
        obj = obj[key]
    if not isinstance(obj, Mapping):
        raise ValueError(f"{path.name} holds a {type(obj).__name__}, not a state dict")
    state = dict(obj)
    if state and all(k.startswith("module.") for k in state):  # saved from a DistributedDataParallel wrapper
        state = {k[len("module."):]: v for k, v in state.items()}
    return {k: cast(k, v) for k, v in state.items()}


def merge_lora(state: dict[str, torch.Tensor], adapter: Mapping[str, torch.Tensor], scaling: float) -> int:
    """Fold a moshi LoRA adapter into `state` in place, as moshi's loader does with fuse_lora (its
    server's default): W' = W + scaling * B @ A, in the weights' dtype, the same operations as
    `moshi.modules.lora.replace_lora_with_linear`. Full tensors saved beside the adapters replace
    the base's first, as moshi's non-strict load does. Returns how many linear layers were merged."""
    pairs = {k[:-len(".lora_A.weight")] for k in adapter if k.endswith(".lora_A.weight")}
    pairs |= {k[:-len(".lora_B.weight")] for k in adapter if k.endswith(".lora_B.weight")}
    for k, v in adapter.items():
        if ".lora_A." in k or ".lora_B." in k:
            continue
        state[k.replace(".frozen_W.", ".")] = v  # moshi's LoRALinear keeps the base linear as frozen_W
    for prefix in sorted(pairs):
        a, b = adapter.get(prefix + ".lora_A.weight"), adapter.get(prefix + ".lora_B.weight")
        if a is None or b is None:
            raise ValueError(f"the LoRA adapter has only one of lora_A / lora_B for {prefix}")
        if prefix + ".weight" not in state:
            raise ValueError(f"the LoRA adapter is for {prefix}, which the LM weights do not have")
        state[prefix + ".weight"] = state[prefix + ".weight"] + scaling * (b @ a)
    return len(pairs)


def load_lm(weights: str | Path | dict[str, torch.Tensor], lm_kwargs: Mapping[str, Any],
            device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
            lora: str | Path | dict[str, torch.Tensor] | None = None) -> tuple[OracleLMModel, bool]:
    """Build the model and load a KAME or Moshi state dict (safetensors or torch file, or a dict),
    with the LoRA adapter `lora` merged in when given (scaling from lm_kwargs, as in moshi).

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
        state = read_state(weights, cast)
    else:
        state = {k: cast(k, v) for k, v in weights.items()}
    state = {EXPOSED.sub(r"\1.linear_\2.weight", k): v for k, v in state.items()}
    backfilled = backfill_oracle(state)  # before the adapter, in KAME's order (its loader backfills first)
    if lora is not None:
        if not lm_kwargs.get("lora"):
            # moshi asserts the same: an adapter for a config that does not say how to apply it
            raise ValueError("the config names a LoRA adapter (lora_name) but does not set lora: true")
        adapter = read_state(lora, cast) if isinstance(lora, (str, Path)) else {k: cast(k, v) for k, v in lora.items()}
        merge_lora(state, adapter, float(lm_kwargs.get("lora_scaling", 2.0)))
    elif lm_kwargs.get("lora"):
        log.warning("the LM config says lora: true but names no adapter (lora_name): loading the base weights as "
                    "they are (moshi would add untrained, randomly initialised adapters)")
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
