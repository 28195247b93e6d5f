"""Finding, loading and writing Moshi/KAME checkpoints.

A checkpoint is the layout of a Moshi Hugging Face repository: `config.json` (the LM's constructor
arguments plus the file names `moshi_name`, `mimi_name`, `tokenizer_name` and optionally
`mimi_config_name`), the LM weights (safetensors), Mimi's weights and the SentencePiece model.
A repository without config.json is taken for Moshi 7B with moshi's default file names, as moshi
itself does. `--moshi-weights DIR` reads such a directory (for example a `huggingface-cli download`
of the repo); `--hf-repo REPO` fetches the same files through the Hugging Face cache.

Everything that is missing is reported at once, in one error that says how to get it.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...errors import FrontEndUnavailable

DEFAULT_HF_REPO = "SakanaAI/kame"
MOSHI_HF_REPO = "kyutai/moshiko-pytorch-bf16"  # Mimi and the tokenizer, if a repo does not ship them
LM_NAME = "model.safetensors"
MIMI_NAME = "tokenizer-e351c8d8-checkpoint125.safetensors"  # moshi's names for the 7B release
TOKENIZER_NAME = "tokenizer_spm_32k_3.model"
FILE_KEYS = ("moshi_name", "mimi_name", "tokenizer_name", "mimi_config_name", "lora_name")
NOT_LM_KEYS = FILE_KEYS + ("model_type", "lm_gen_config", "tts_config", "stt_config", "model_id", "tandem_training")


def how_to_get(repo: str = DEFAULT_HF_REPO) -> str:
    return (f"download it where the Hugging Face hub is reachable (`huggingface-cli download {repo} --local-dir DIR`; "
            f"Mimi and the tokenizer also come with `huggingface-cli download {MOSHI_HF_REPO}`) and pass "
            f"--moshi-weights DIR; see docs/GPU.md")


@dataclass
class CheckpointFiles:
    lm: Path
    mimi: Path
    tokenizer: Path
    lm_kwargs: dict[str, Any] | None  # None: moshi's Moshi 7B config
    mimi_config: dict[str, Any] | None = None  # None: moshi's Mimi config
    raw_config: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def lm_gen_config(self) -> dict[str, Any]:
        return dict(self.raw_config.get("lm_gen_config", {}))


def _lm_kwargs(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k not in NOT_LM_KEYS}


def _first(d: Path, patterns: list[str], exclude: frozenset[Path] = frozenset()) -> Path | None:
    for pat in patterns:
        for p in sorted(d.glob(pat)):
            if p.is_file() and p not in exclude:
                return p
    return None


def from_dir(d: str | Path) -> CheckpointFiles:
    """Resolve a local checkpoint directory; one FrontEndUnavailable naming everything missing."""
    d = Path(d)
    if not d.is_dir():
        raise FrontEndUnavailable(f"--moshi-weights {d}: no such directory; {how_to_get()}")
    raw: dict[str, Any] = {}
    cfg_path = d / "config.json"
    if cfg_path.exists():
        try:
            raw = json.loads(cfg_path.read_text())
        except json.JSONDecodeError as e:
            raise FrontEndUnavailable(f"{cfg_path} is not valid JSON ({e}); {how_to_get()}") from e
    missing: list[str] = []

    def named(key: str, default: str, fallbacks: list[str], what: str,
              exclude: frozenset[Path] = frozenset()) -> Path | None:
        name = raw.get(key, default)
        p = d / name
        if p.is_file():
            return p
        # a directory laid out by hand may use other names: accept one clear candidate
        alt = None if key in raw else _first(d, fallbacks, exclude)
        if alt is None:
            missing.append(f"{what} ({name})")
        return alt

    tokenizer = named("tokenizer_name", TOKENIZER_NAME, ["*.model"], "SentencePiece tokenizer")
    mimi = named("mimi_name", MIMI_NAME, ["tokenizer-*.safetensors", "mimi*.safetensors"], "Mimi weights")
    lm = named("moshi_name", LM_NAME, ["*.safetensors"], "LM weights", exclude=frozenset(p for p in [mimi] if p))
    mimi_config = None
    if "mimi_config_name" in raw:
        mc = d / raw["mimi_config_name"]
        if mc.is_file():
            mimi_config = json.loads(mc.read_text())
        else:
            missing.append(f"Mimi config ({raw['mimi_config_name']})")
    if missing:
        raise FrontEndUnavailable(f"--moshi-weights {d} is incomplete: missing {', '.join(missing)}; {how_to_get()}")
    assert lm is not None and mimi is not None and tokenizer is not None
    return CheckpointFiles(lm, mimi, tokenizer, _lm_kwargs(raw) if raw else None, mimi_config, raw, source=str(d))


def from_hf(repo: str = DEFAULT_HF_REPO, revision: str | None = None) -> CheckpointFiles:
    """Fetch a checkpoint through the Hugging Face cache (needs the hub, or a warm cache)."""
    try:
        from huggingface_hub import hf_hub_download
    except ModuleNotFoundError as e:
        raise FrontEndUnavailable(f"--hf-repo needs huggingface_hub; or {how_to_get(repo)}") from e

    online: bool | None = None  # probed once, only when something is not in the local cache

    def get(name: str, repos: list[str]) -> Path:
        nonlocal online
        errors = []
        for r in repos:
            rev = revision if r == repo else None
            try:  # a warm cache answers at once, with or without a network
                return Path(hf_hub_download(r, name, revision=rev, local_files_only=True))
            except Exception:  # noqa: BLE001 - not cached (or the cache is unusable): try the hub
                pass
            if online is None:
                online = hub_reachable()
            if not online:
                errors.append(f"{r}: not in the local cache and the hub is not reachable from here")
                continue
            try:
                return Path(hf_hub_download(r, name, revision=rev))
            except Exception as e:  # noqa: BLE001 - missing file, auth, network: all end the same way
                errors.append(f"{r}: {type(e).__name__}")
        raise FrontEndUnavailable(f"could not fetch {name} from the Hugging Face hub ({'; '.join(errors)}); "
                                  f"{how_to_get(repo)}")

    raw: dict[str, Any] = {}
    try:
        raw = json.loads(get("config.json", [repo]).read_text())
    except FrontEndUnavailable:
        # moshi treats a repo without config.json as Moshi 7B; if the hub is down the LM fetch says so
        raw = {}
    lm = get(raw.get("moshi_name", LM_NAME), [repo])
    mimi = get(raw.get("mimi_name", MIMI_NAME), [repo, MOSHI_HF_REPO])
    tokenizer = get(raw.get("tokenizer_name", TOKENIZER_NAME), [repo, MOSHI_HF_REPO])
    mimi_config = None
    if "mimi_config_name" in raw:
        mimi_config = json.loads(get(raw["mimi_config_name"], [repo]).read_text())
    return CheckpointFiles(lm, mimi, tokenizer, _lm_kwargs(raw) if raw else None, mimi_config, raw,
                           source=f"hf://{repo}")


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Can a TCP connection to the hub be opened? huggingface_hub retries unreachable hosts with
    back-off (tens of seconds per file); this answers in at most `timeout_s`."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout_s).close()
        return True
    except OSError:
        return False


def resolve(moshi_weights: str | Path | None = None, hf_repo: str | None = None) -> CheckpointFiles:
    if moshi_weights is not None:
        return from_dir(moshi_weights)
    return from_hf(hf_repo or DEFAULT_HF_REPO)


def default_dtype(device: str | torch.device) -> torch.dtype:
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def parse_dtype(name: str | None, device: str | torch.device) -> torch.dtype:
    if name in (None, "", "auto"):
        return default_dtype(device)
    table = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
             "fp32": torch.float32, "float32": torch.float32}
    if name not in table:
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(table)} or auto")
    return table[name]


def save(out_dir: str | Path, lm: torch.nn.Module | dict[str, torch.Tensor], lm_kwargs: dict[str, Any],
         mimi_weights: Path, tokenizer: Path, mimi_config: dict[str, Any] | None = None,
         extra: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint directory that `--moshi-weights` (and moshi's own loaders, minus the
    oracle) can read: KAME parameter names, Moshi file layout. `lm` is the model or its state dict."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = lm if isinstance(lm, dict) else lm.state_dict()
    state = {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}
    save_file(state, str(out / LM_NAME))
    cfg: dict[str, Any] = {**lm_kwargs, "moshi_name": LM_NAME, "mimi_name": mimi_weights.name,
                           "tokenizer_name": tokenizer.name, "model_type": "moshi", **(extra or {})}
    for src in (mimi_weights, tokenizer):
        if src.resolve() != (out / src.name).resolve():
            shutil.copyfile(src, out / src.name)
    if mimi_config is not None:
        (out / "mimi_config.json").write_text(json.dumps(mimi_config, indent=1))
        cfg["mimi_config_name"] = "mimi_config.json"
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out
