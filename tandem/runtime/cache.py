"""The one directory tandem keeps what it builds and indexes between runs (llama wheels, knowledge indexes)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$TANDEM_CACHE, else the user's cache directory's tandem/ ($XDG_CACHE_HOME or ~/.cache)."""
    return Path(os.environ.get("TANDEM_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                                os.path.expanduser("~/.cache"), "tandem"))
