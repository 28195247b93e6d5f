"""`tandem train moshi`: fine-tune Moshi with the oracle stream (KAME's recipe), fully or with LoRA.

Recipe (REFERENCE 1.3): start from a public checkpoint (a KAME one, or Moshi with the oracle
embedding copied from the text embedding), AdamW with lr 3e-5 and weight decay 0.1, loss = text
cross-entropy (PAD and end-of-padding targets weighted 0.5) + audio cross-entropy over the
assistant's codebooks (semantic codebook weighted 100, acoustic ones 1). LoRA (moshi's own
LoRALinear on every linear layer, B initialised to zero so training starts from the base model)
trains the adapters and the oracle embedding only, which is what fits a single 24-48 GB GPU.
Checkpoints are written merged, in the layout `--moshi-weights` loads.
"""
from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..oracles import KAME, OracleRecipe

log = logging.getLogger(__name__)


@dataclass
class MoshiTrainConfig:
    lr: float = 3e-5
    weight_decay: float = 0.1
    max_steps: int = 2000
    minutes: float = 60.0
    batch: int = 4
    frames: int = 250  # 20 s windows
    lora: bool = False
    lora_rank: int = 64
    lora_scaling: float = 2.0
    text_pad_weight: float = 0.5
    semantic_weight: float = 100.0
    acoustic_weight: float = 1.0
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 10
    gradient_checkpointing: bool = False
    # fp32 trainable weights (and optimizer state), bf16 compute under autocast. Pure bf16 AdamW loses
    # updates smaller than bf16's resolution, which at lr 3e-5 is most of them.
    mixed_precision: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


# -- batches ---------------------------------------------------------------------------------------
def sample_batch(rng: random.Random, examples: list[dict[str, np.ndarray]], batch: int, frames: int,
                 pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows; past an example's end the codes are moshi's zero token (-1: no input, no loss)."""
    K = examples[0]["codes"].shape[0]
    codes = np.full((batch, K, frames), -1, np.int64)
    oracle = np.full((batch, frames), pad_id, np.int64)
    for b in range(batch):
        ex = examples[rng.randrange(len(examples))]
        T = ex["codes"].shape[1]
        s = rng.randrange(max(1, T - frames + 1))
        n = min(frames, T - s)
        codes[b, :, :n] = ex["codes"][:, s:s + n]
        oracle[b, :n] = ex["oracle"][s:s + n]
    return torch.from_numpy(codes), torch.from_numpy(oracle)


# -- loss -----------------------------------------------------------------------------------------
def kame_loss(model: Any, codes: torch.Tensor, oracle: torch.Tensor, cfg: MoshiTrainConfig, pad_id: int,
              end_pad_id: int) -> tuple[torch.Tensor, dict[str, float]]:
    out = model(codes, oracle_tokens=oracle)
    # text: every valid column, padding targets down-weighted
    tm = out.text_mask[:, 0]
    tt = codes[:, 0][tm]
    t_ce = F.cross_entropy(out.text_logits[:, 0][tm].float(), tt, reduction="none")
    tw = torch.where((tt == pad_id) | (tt == end_pad_id), cfg.text_pad_weight, 1.0)
    text_loss = (t_ce * tw).sum() / tw.sum().clamp(min=1e-6)
    # audio: the assistant's codebooks only (the user's are inputs), semantic codebook weighted up
    dep_q = out.logits.shape[1]
    am = out.mask
    at = codes[:, 1:1 + dep_q]
    a_ce = F.cross_entropy(out.logits[am].float(), at[am], reduction="none")
    cw = torch.full((dep_q,), cfg.acoustic_weight, device=codes.device)
    cw[0] = cfg.semantic_weight
    aw = cw[:, None].expand(dep_q, am.shape[-1])[None].expand_as(am)[am]
    audio_loss = (a_ce * aw).sum() / aw.sum().clamp(min=1e-6)
    loss = text_loss + audio_loss
    return loss, {"loss": loss.item(), "text": text_loss.item(), "audio": audio_loss.item(),
                  "semantic": a_ce[aw == cfg.semantic_weight].mean().item() if a_ce.numel() else 0.0}


# -- LoRA ----------------------------------------------------------------------------------------
def apply_lora(model: torch.nn.Module, rank: int, scaling: float) -> int:
    """moshi's LoRALinear on every linear layer; train adapters + oracle embedding. Returns #trainable."""
    from moshi.modules.lora import LoRALinear, replace_all_linear_with_lora

    replace_all_linear_with_lora(model, rank, scaling)
    for m in model.modules():
        if isinstance(m, LoRALinear):
            torch.nn.init.zeros_(m.lora_B.weight)  # the adapted model starts as the base model
    n = 0
    for name, p in model.named_parameters():
        p.requires_grad = ".lora_A." in name or ".lora_B." in name or name.startswith("oracle_emb.")
        n += p.numel() if p.requires_grad else 0
    return n


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with every LoRA adapter folded into its base weight (plain names)."""
    from moshi.modules.lora import LoRALinear

    loras = {name for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    out: dict[str, torch.Tensor] = {}
    for k, v in model.state_dict().items():
        prefix = k.rsplit(".", 2)[0] if k.count(".") >= 2 else ""
        if prefix in loras:
            if k.endswith("frozen_W.weight"):
                out[prefix + ".weight"] = model.get_submodule(prefix).merge_weight().detach()
            elif k.endswith("frozen_W.bias"):
                out[prefix + ".bias"] = v
            continue  # lora_A / lora_B are folded in
        out[k] = v
    return out


# -- the run ---------------------------------------------------------------------------------------
def train_moshi(files: Any, examples: list[dict[str, np.ndarray]], cfg: MoshiTrainConfig, out_dir: Path,
                device: str = "cpu", dtype: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Fine-tune the LM of checkpoint `files` on `examples`; write the checkpoint to out_dir."""
    from moshi.models.loaders import _lm_kwargs as moshi_7b_kwargs

    from ...frontends.moshi import checkpoint
    from ...frontends.moshi._deps import compile_guard
    from ...frontends.moshi.model import load_lm
    from ...frontends.moshi.tokenizer import MoshiTokenizer

    if not examples:
        raise ValueError("no training examples")
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    dt = checkpoint.parse_dtype(dtype, device)
    if cfg.mixed_precision and not cfg.lora:
        dt = torch.float32  # full fine-tuning: every weight is trained, so every weight is fp32
    lm_kwargs = files.lm_kwargs if files.lm_kwargs is not None else dict(moshi_7b_kwargs)
    kwargs = {**lm_kwargs, "gradient_checkpointing": cfg.gradient_checkpointing} if cfg.gradient_checkpointing \
        else lm_kwargs
    model, backfilled = load_lm(files.lm, kwargs, device=device, dtype=dt, lora=files.lora)
    tok = MoshiTokenizer(files.tokenizer, model.text_initial_token_id, model.text_padding_token_id,
                         model.end_of_text_padding_id)
    if cfg.lora:
        n_train = apply_lora(model, cfg.lora_rank, cfg.lora_scaling)
        model.to(device)
    else:
        n_train = sum(p.numel() for p in model.parameters())
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.mixed_precision:
        for p in params:  # LoRA: frozen base stays in its dtype, adapters and oracle embedding in fp32
            p.data = p.data.float()
    dev_type = torch.device(device).type
    autocast = (lambda: torch.autocast(device_type=dev_type, dtype=torch.bfloat16)) if cfg.mixed_precision \
        else contextlib.nullcontext
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    history: list[dict[str, float]] = []
    t0 = time.time()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.max_steps, desc="train moshi", unit="step")
    step = 0
    guard = compile_guard(device)
    guard.__enter__()
    try:
        while step < cfg.max_steps and time.time() - t0 < cfg.minutes * 60:
            codes, oracle = sample_batch(rng, examples, cfg.batch, cfg.frames, tok.pad_id)
            with autocast():
                loss, parts = kame_loss(model, codes.to(device), oracle.to(device), cfg, tok.pad_id, tok.end_pad_id)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            step += 1
            history.append({"step": step, **parts})
            if bar is not None:
                bar.update(1)
                if step % cfg.log_every == 0:
                    bar.set_postfix(loss=f"{parts['loss']:.3f}")
    finally:
        guard.__exit__(None, None, None)
        if bar is not None:
            bar.close()
    model.eval()
    state = merged_state_dict(model) if cfg.lora else model.state_dict()
    meta = {"steps": step, "minutes": round((time.time() - t0) / 60, 2), "trainable_params": n_train,
            "trainable_dtypes": sorted({str(p.dtype) for p in params}),
            "frozen_dtypes": sorted({str(p.dtype) for p in model.parameters() if not p.requires_grad}),
            "base": files.source, "base_had_oracle": not backfilled, "config": asdict(cfg),
            "first_loss": history[0]["loss"] if history else None,
            "last_loss": float(np.mean([h["loss"] for h in history[-10:]])) if history else None}
    out_dir = Path(out_dir)
    checkpoint.save(out_dir, state, dict(lm_kwargs), files.mimi, files.tokenizer, mimi_config=files.mimi_config,
                    training={k: v for k, v in meta.items() if k != "config"})
    (out_dir / "history.json").write_text(json.dumps({"meta": meta, "history": history}, indent=1))
    return meta


def prepare_data(files: Any, out_dir: Path, n: int, seed: int, renderer: Any, device: str = "cpu",
                 manifest: Path | None = None, recipe: OracleRecipe | None = None) -> Path:
    """Shards from synthetic dialogues (n of them) or a manifest of real two-channel dialogues,
    encoded with the checkpoint's own Mimi and tokenizer."""
    from moshi.models.loaders import get_mimi

    from ...frontends.moshi._deps import compile_guard
    from ...frontends.moshi.tokenizer import MoshiTokenizer
    from .data import build_moshi_example, read_manifest, synthetic_dialogues, write_shards

    raw = files.raw_config
    dep_q = int(raw.get("dep_q", 8)) if raw else 8
    text_card = int(raw.get("text_card", 32000)) if raw else 32000
    mimi = get_mimi(files.mimi, files.mimi_config, device=device, num_codebooks=dep_q)
    tok = MoshiTokenizer(files.tokenizer, start_id=text_card, pad_id=int(raw.get("existing_text_padding_id", 3))
                         if raw else 3)
    rng = random.Random(seed + 1)
    dialogues = read_manifest(manifest) if manifest else synthetic_dialogues(n, seed, renderer)
    recipe = recipe or KAME
    examples = (build_moshi_example(d, mimi, tok, dep_q, rng, recipe) for d in dialogues)
    with compile_guard(device):
        write_shards(out_dir, examples, meta={"source": str(manifest) if manifest else f"synthetic n={n} seed={seed}",
                                              "base": files.source, "recipe": asdict(recipe)})
    return out_dir


def run_cli(args: Any) -> int:
    """`tandem train moshi` (options in tandem.frontends.moshi.options.add_train_args)."""
    from ...runtime.errors import TandemError
    from ...frontends.moshi import checkpoint
    from ...frontends.moshi._deps import require_moshi
    from .data import ToneRenderer, VoiceRenderer, read_shards

    require_moshi()
    out = Path(args.out or "out/moshi")
    device = args.moshi_device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.tiny:
        from ...frontends.moshi.tiny import write_tiny_checkpoint

        files = checkpoint.from_dir(write_tiny_checkpoint(out / "base", seed=args.seed))
    else:
        files = checkpoint.resolve(args.moshi_weights, args.hf_repo)
    data_dir = Path(args.data or out / "data")
    if args.synthesize or args.manifest or not (data_dir / "shards.json").exists():
        n = args.synthesize or (6 if args.tiny else 1000)
        renderer = ToneRenderer() if args.voices == "tone" or args.tiny else VoiceRenderer()
        print(f"making training shards in {data_dir} ({'manifest ' + str(args.manifest) if args.manifest else f'{n} synthetic dialogues'})")
        prepare_data(files, data_dir, n, args.seed, renderer, device, args.manifest)
    try:
        examples = read_shards(data_dir)
    except FileNotFoundError as e:
        raise TandemError(str(e)) from None
    cfg = MoshiTrainConfig(lr=args.lr or (3e-3 if args.tiny else 3e-5), max_steps=args.max_steps,
                           minutes=args.minutes, batch=args.batch_size or (2 if args.tiny else 4),
                           frames=args.frames or (40 if args.tiny else 250), lora=args.lora,
                           lora_rank=args.lora_rank, seed=args.seed,
                           gradient_checkpointing=args.gradient_checkpointing,
                           mixed_precision=args.mixed_precision)
    meta = train_moshi(files, examples, cfg, out / "checkpoint", device=device, dtype=args.moshi_dtype)
    print(f"trained {meta['steps']} steps in {meta['minutes']} min ({meta['trainable_params']:,} trainable parameters); "
          f"loss {meta['first_loss']:.3f} -> {meta['last_loss']:.3f}; "
          f"checkpoint {out / 'checkpoint'} (tandem run --front-end moshi --moshi-weights {out / 'checkpoint'})")
    return 0
