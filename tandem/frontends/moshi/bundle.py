"""A loaded Moshi/KAME checkpoint: the oracle LM, Mimi and the tokenizer, on one device."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from ...runtime.errors import FrontEndUnavailable
from ._deps import require_moshi
from .checkpoint import CheckpointFiles, how_to_get, parse_dtype
from .tokenizer import MoshiTokenizer

log = logging.getLogger(__name__)


@dataclass
class MoshiBundle:
    lm: Any  # OracleLMModel
    mimi: Any  # moshi.models.MimiModel
    tokenizer: MoshiTokenizer
    files: CheckpointFiles
    backfilled: bool  # the LM had no oracle embedding (a plain Moshi checkpoint)
    device: torch.device
    dtype: torch.dtype


def load_bundle(files: CheckpointFiles, device: str = "cpu", dtype: str | torch.dtype | None = None) -> MoshiBundle:
    require_moshi()
    from moshi.models.loaders import _lm_kwargs as moshi_7b_kwargs
    from moshi.models.loaders import get_mimi

    from .model import load_lm

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise FrontEndUnavailable("--moshi-device cuda was asked for, but torch sees no CUDA device "
                                  "(this torch build or machine has none); use --moshi-device cpu")
    dt = dtype if isinstance(dtype, torch.dtype) else parse_dtype(dtype, dev)
    lm_kwargs = files.lm_kwargs if files.lm_kwargs is not None else dict(moshi_7b_kwargs)
    try:
        lm, backfilled = load_lm(files.lm, lm_kwargs, device=dev, dtype=dt, lora=files.lora)
    except TypeError as e:  # config.json names an argument this moshi's LMModel does not take
        raise FrontEndUnavailable(f"the LM config of {files.source} does not fit moshi {_moshi_version()}'s "
                                  f"LMModel ({e}); is it a Moshi/KAME checkpoint?") from e
    except (ValueError, KeyError, OSError) as e:
        what = f"{files.lm} with the LoRA adapter {files.lora}" if files.lora else str(files.lm)
        raise FrontEndUnavailable(f"cannot load the LM weights {what}: {e}; {how_to_get()}") from e
    if backfilled:
        log.warning("%s has no oracle embedding (a plain Moshi checkpoint): oracle_emb starts as a copy of "
                    "text_emb, so oracles are heard but the model was never trained to use them", files.lm)
    n_codebooks = max(lm.dep_q, lm.n_q - lm.dep_q)
    try:
        # Mimi stays in float32 whatever the LM's dtype, as in moshi's own server
        mimi = get_mimi(files.mimi, files.mimi_config, device=dev, num_codebooks=n_codebooks)
    except Exception as e:  # noqa: BLE001 - moshi raises plain RuntimeError/KeyError for bad files
        raise FrontEndUnavailable(f"cannot load the Mimi weights {files.mimi}: {type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else ''}; {how_to_get()}") from e
    tok = MoshiTokenizer(files.tokenizer, start_id=lm.text_initial_token_id, pad_id=lm.text_padding_token_id,
                         end_pad_id=lm.end_of_text_padding_id)
    if tok.vocab_size > lm.text_card:
        raise FrontEndUnavailable(f"tokenizer {files.tokenizer} has {tok.vocab_size} pieces but the LM's text "
                                  f"vocabulary is {lm.text_card}: they are not from the same checkpoint")
    return MoshiBundle(lm, mimi, tok, files, backfilled, dev, dt)


def _moshi_version() -> str:
    import moshi

    return getattr(moshi, "__version__", "?")
