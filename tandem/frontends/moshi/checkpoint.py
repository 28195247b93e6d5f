"""Finding, loading and writing Moshi/KAME checkpoints.

A checkpoint is the layout of a Moshi Hugging Face repository: `config.json` (the LM's constructor
arguments plus the file names `moshi_name`, `mimi_name`, `tokenizer_name` and optionally
`mimi_config_name` and `lora_name`), the LM weights, Mimi's weights and the SentencePiece model.
A repository without config.json is taken for Moshi 7B with moshi's default file names, as moshi
itself does. `--moshi-weights DIR` reads such a directory (for example a `huggingface-cli download`
of the repo); `--hf-repo REPO` fetches the same files through the Hugging Face cache.

File names are read as moshi's own loader (`moshi.models.loaders.hf_get`) reads them: a plain name
is a file of the checkpoint, `hf://OWNER/REPO/PATH` a file of another hub repository, `file://PATH`
a local file. A kame_finetune export (`model.safetensors` + `moshi_lm_kwargs.json`, the LM's
constructor arguments and nothing else) reads as a directory whose config names no files.

Everything that is missing is reported at once, in one error that says how to get it.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...runtime.errors import FrontEndUnavailable

DEFAULT_HF_REPO = "SakanaAI/kame"
MOSHI_HF_REPO = "kyutai/moshiko-pytorch-bf16"  # Mimi and the tokenizer, if a repo does not ship them
LM_NAME = "model.safetensors"
MIMI_NAME = "tokenizer-e351c8d8-checkpoint125.safetensors"  # moshi's names for the 7B release
TOKENIZER_NAME = "tokenizer_spm_32k_3.model"
# moshi's config.json; kame_finetune's exports carry the same LM arguments as moshi_lm_kwargs.json
CONFIG_NAMES = ("config.json", "moshi_lm_kwargs.json")
TRAINING_NAME = "tandem_training.json"  # `tandem train moshi`'s record, beside config.json: moshi ignores it
FILE_KEYS = ("moshi_name", "mimi_name", "tokenizer_name", "mimi_config_name", "lora_name")
# tandem_training: checkpoints written before TRAINING_NAME kept it in config.json
NOT_LM_KEYS = FILE_KEYS + ("model_type", "lm_gen_config", "tts_config", "stt_config", "model_id", "tandem_training")
LORA_KEYS = ("lora", "lora_rank", "lora_scaling")  # LM arguments in moshi's config that describe an adapter
LM_PATTERNS = ["*.safetensors", "*.sft", "*.pt", "*.pth"]


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
    lora: Path | None = None  # a LoRA adapter to merge into the LM (config.json's lora_name)

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


class _Unfetched(Exception):
    """A named file could not be had; the caller words the error."""


class _Hub:
    """Files from the Hugging Face hub: the local cache first (no network), the hub only if it
    answers. Reachability is probed once, and only when something is not cached."""

    def __init__(self, repo: str | None = None, revision: str | None = None) -> None:
        self.repo, self.revision = repo, revision  # the revision applies to this repo only
        self.online: bool | None = None

    def cached(self, repo: str, name: str) -> Path | None:
        try:
            from huggingface_hub import hf_hub_download

            rev = self.revision if repo == self.repo else None
            return Path(hf_hub_download(repo, name, revision=rev, local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached, no huggingface_hub, unusable cache: all "not here"
            return None

    def get(self, name: str, repos: list[str]) -> Path:
        errors = []
        for r in repos:
            p = self.cached(r, name)
            if p is not None:
                return p
            if self.online is None:
                self.online = hub_reachable()
            if not self.online:
                errors.append(f"{r}: not in the local cache and the hub is not reachable from here")
                continue
            try:
                from huggingface_hub import hf_hub_download

                return Path(hf_hub_download(r, name, revision=self.revision if r == self.repo else None))
            except Exception as e:  # noqa: BLE001 - missing file, auth, network: all end the same way
                errors.append(f"{r}: {type(e).__name__}")
        raise _Unfetched(f"could not fetch {name} from the Hugging Face hub ({'; '.join(errors)})")


def _uri(value: str, hub: _Hub, base: Path | None) -> Path | None:
    """moshi's `hf_get` for `hf://` and `file://` names; None for a plain name (the caller's to find)."""
    if value.startswith("hf://"):
        parts = value[len("hf://"):].split("/")
        if len(parts) < 3 or not all(parts):
            raise _Unfetched(f"{value}: an hf:// name is hf://OWNER/REPO/PATH")
        return hub.get("/".join(parts[2:]), [f"{parts[0]}/{parts[1]}"])
    if value.startswith("file://"):
        p = Path(value[len("file://"):]).expanduser()
        # moshi opens it as given (relative to the working directory); a relative name that is not
        # there is also looked for beside config.json, so a checkpoint directory can be moved whole
        if not p.is_absolute() and not p.exists() and base is not None and (base / p).exists():
            p = base / p
        if not p.is_file():
            raise _Unfetched(f"{value}: no such file")
        return p
    return None


def _read_config(d: Path) -> dict[str, Any]:
    for name in CONFIG_NAMES:
        path = d / name
        if path.exists():
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError as e:
                raise FrontEndUnavailable(f"{path} is not valid JSON ({e}); {how_to_get()}") from e
    return {}


def from_dir(d: str | Path) -> CheckpointFiles:
    """Resolve a local checkpoint directory; one FrontEndUnavailable naming everything missing."""
    d = Path(d)
    if not d.is_dir():
        raise FrontEndUnavailable(f"--moshi-weights {d}: no such directory; {how_to_get()}")
    raw = _read_config(d)
    hub = _Hub()
    missing: list[str] = []

    def named(key: str, default: str, fallbacks: list[str], what: str, exclude: frozenset[Path] = frozenset(),
              cache_repo: str | None = None) -> Path | None:
        name = raw.get(key, default)
        try:
            uri = _uri(name, hub, d)
        except _Unfetched as e:
            missing.append(f"{what} ({e})")
            return None
        if uri is not None:
            return uri
        p = d / name
        if p.is_file():
            return p
        # a directory laid out by hand may use other names: accept one clear candidate
        alt = None if key in raw else _first(d, fallbacks, exclude)
        if alt is None and cache_repo is not None:
            # kame_finetune exports carry the LM only; moshi takes Mimi and the tokenizer from the
            # Moshi repo, which a warm Hugging Face cache holds without any network
            alt = hub.cached(cache_repo, name)
        if alt is None:
            missing.append(f"{what} ({name})")
        return alt

    tokenizer = named("tokenizer_name", TOKENIZER_NAME, ["*.model"], "SentencePiece tokenizer",
                      cache_repo=MOSHI_HF_REPO)
    mimi = named("mimi_name", MIMI_NAME, ["tokenizer-*.safetensors", "mimi*.safetensors"], "Mimi weights",
                 cache_repo=MOSHI_HF_REPO)
    lora = named("lora_name", "", [], "LoRA adapter") if raw.get("lora_name") else None
    lm = named("moshi_name", LM_NAME, LM_PATTERNS, "LM weights", exclude=frozenset(p for p in [mimi, lora] if p))
    mimi_config = None
    if "mimi_config_name" in raw:
        mc = named("mimi_config_name", "", [], "Mimi config")
        mimi_config = json.loads(mc.read_text()) if mc is not None else None
    if missing:
        raise FrontEndUnavailable(f"--moshi-weights {d} is incomplete: missing {', '.join(missing)}; {how_to_get()}")
    assert lm is not None and mimi is not None and tokenizer is not None
    return CheckpointFiles(lm, mimi, tokenizer, _lm_kwargs(raw) if raw else None, mimi_config, raw, source=str(d),
                           lora=lora)


def from_hf(repo: str = DEFAULT_HF_REPO, revision: str | None = None) -> CheckpointFiles:
    """Fetch a checkpoint through the Hugging Face cache (needs the hub, or a warm cache)."""
    try:
        import huggingface_hub  # noqa: F401
    except ModuleNotFoundError as e:
        raise FrontEndUnavailable(f"--hf-repo needs huggingface_hub; or {how_to_get(repo)}") from e
    hub = _Hub(repo, revision)
    raw: dict[str, Any] = {}
    for cfg_name in CONFIG_NAMES:
        try:
            raw = json.loads(hub.get(cfg_name, [repo]).read_text())
            break
        except _Unfetched:
            # moshi treats a repo without config.json as Moshi 7B; if the hub is down the LM fetch says so
            continue

    def get(key: str, default: str, repos: list[str]) -> Path:
        name = raw.get(key, default)
        return _uri(name, hub, None) or hub.get(name, repos)

    try:
        lm = get("moshi_name", LM_NAME, [repo])
        mimi = get("mimi_name", MIMI_NAME, [repo, MOSHI_HF_REPO])
        tokenizer = get("tokenizer_name", TOKENIZER_NAME, [repo, MOSHI_HF_REPO])
        lora = get("lora_name", "", [repo]) if raw.get("lora_name") else None
        mimi_config = None
        if "mimi_config_name" in raw:
            mimi_config = json.loads(get("mimi_config_name", "", [repo]).read_text())
    except _Unfetched as e:
        raise FrontEndUnavailable(f"{e}; {how_to_get(repo)}") from e
    return CheckpointFiles(lm, mimi, tokenizer, _lm_kwargs(raw) if raw else None, mimi_config, raw,
                           source=f"hf://{repo}", lora=lora)


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
         training: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint directory that `--moshi-weights` (and moshi's own loaders, minus the
    oracle) can read: KAME parameter names, Moshi file layout. `lm` is the model or its state dict,
    with any LoRA adapter already merged. `training` (how it was trained) goes to its own file,
    tandem_training.json: moshi passes every unknown config.json key to LMModel, which refuses it."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = lm if isinstance(lm, dict) else lm.state_dict()
    state = {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}
    save_file(state, str(out / LM_NAME))
    # the weights are merged: moshi would wrap a config that still says lora in fresh random adapters
    kwargs = {k: v for k, v in lm_kwargs.items() if k not in LORA_KEYS and k not in NOT_LM_KEYS}
    cfg: dict[str, Any] = {**kwargs, "moshi_name": LM_NAME, "mimi_name": mimi_weights.name,
                           "tokenizer_name": tokenizer.name, "model_type": "moshi"}
    for src in (mimi_weights, tokenizer):
        if src.resolve() != (out / src.name).resolve():
            shutil.copyfile(src, out / src.name)
    if mimi_config is not None:
        (out / "mimi_config.json").write_text(json.dumps(mimi_config, indent=1))
        cfg["mimi_config_name"] = "mimi_config.json"
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    if training is not None:
        (out / TRAINING_NAME).write_text(json.dumps(training, indent=1))
    return out
