"""Importing the `moshi` package with a clear error when it is missing.

Nothing in `tandem` imports moshi at module import time: the front-end registry imports
`tandem.frontends.moshi` in every installation, and a missing optional package must only matter
when the moshi front-end is actually asked for.
"""
from __future__ import annotations

import contextlib

from ...runtime.errors import FrontEndUnavailable

MOSHI_VERSION = "0.2.13"
INSTALL_HINT = (f"install it without letting pip replace torch: `.venv/bin/pip install --no-deps moshi=={MOSHI_VERSION}` "
                f"plus einops, safetensors and sphn as pinned in requirements.lock (`make setup` does both)")


def require_moshi() -> None:
    """Raise FrontEndUnavailable (one line, actionable) if moshi or its runtime needs are missing."""
    try:
        import einops  # noqa: F401
        import safetensors  # noqa: F401
        import sentencepiece  # noqa: F401

        import moshi.models  # noqa: F401
    except ModuleNotFoundError as e:
        raise FrontEndUnavailable(f"the moshi front-end needs the Python package {e.name!r}; {INSTALL_HINT}") from e


def compile_guard(device: object) -> contextlib.AbstractContextManager:
    """moshi compiles a few kernels with torch.compile on first use: on a GPU that pays off; on a CPU
    it costs seconds and compiler worker processes for nothing at these sizes, so it is turned off."""
    import torch

    if torch.device(device).type == "cuda":  # type: ignore[arg-type]
        return contextlib.nullcontext()
    from moshi.utils.compile import no_compile

    return no_compile()
