"""The Moshi front-end with KAME's oracle stream: registers itself as "moshi".

Importing this package is cheap and never needs the `moshi` package: the factory imports the model
code when a moshi front-end is actually built, so installations without moshi keep working.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ...speak.frontend import register

log = logging.getLogger(__name__)
_cache: dict[tuple, Any] = {}  # the last loaded bundle: `tandem run` checks, then builds, the front-end


def load(moshi_weights: str | Path | None = None, hf_repo: str | None = None, device: str | None = None,
         dtype: str | None = None) -> Any:
    """Resolve and load a checkpoint (cached: building a second front-end reuses the weights)."""
    from ._deps import require_moshi

    require_moshi()
    import torch

    from . import checkpoint
    from .bundle import load_bundle

    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    files = checkpoint.resolve(moshi_weights, hf_repo)
    key = (str(files.lm), str(files.lora), str(files.mimi), str(files.tokenizer), dev, dtype)
    if key not in _cache:
        _cache.clear()  # one model in memory at a time
        _cache[key] = load_bundle(files, device=dev, dtype=dtype)
    return _cache[key]


def make_front_end(moshi_weights: str | Path | None = None, hf_repo: str | None = None, device: str | None = None,
                   dtype: str | None = None, seed: int | None = None, batch_size: int = 1,
                   checkpoint: str | Path | None = None, tts: Any = None, **sampling: Any) -> Any:
    """Factory for `tandem.speak.frontend.build("moshi", ...)`. `checkpoint` (tandem run --checkpoint) is an
    alias of `moshi_weights`; `tts` is ignored (Moshi speaks with its own voice); the remaining keyword
    arguments are LMGen settings (the fields of frontend.Sampling: temp, temp_text, top_k, ...)."""
    from .frontend import MoshiFrontEnd, Sampling, sampling_defaults
    from .options import env_defaults

    env = env_defaults()  # TANDEM_MOSHI_* (set by `tandem bench`, or by hand) fill what was not given
    moshi_weights = moshi_weights or checkpoint or env.get("moshi_weights")
    seed = seed if seed is not None else env.get("seed")
    bundle = load(moshi_weights, hf_repo or env.get("hf_repo"), device or env.get("device"), dtype or env.get("dtype"))
    # the checkpoint's own sampling defaults (moshi's lm_gen_config), then what the caller asked for
    defaults = sampling_defaults(bundle.files.lm_gen_config)
    return MoshiFrontEnd(bundle, batch_size=batch_size, sampling=Sampling(**{**defaults, **sampling}), seed=seed)


register("moshi", make_front_end)
