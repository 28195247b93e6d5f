"""Every published checkpoint layout loads, and loads to what moshi's (or KAME's) own loader makes.

Tiny random models written to temporary directories in each layout; nothing is downloaded (the
Hugging Face hub is replaced by a dictionary of local files).
"""
import os

os.environ.setdefault("NO_TORCH_COMPILE", "1")  # before moshi is imported: no compiler workers on a CPU

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("moshi")

from moshi.models import LMGen, LMModel, loaders  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from tandem.runtime.errors import FrontEndUnavailable  # noqa: E402
from tandem.frontends.moshi import checkpoint  # noqa: E402
from tandem.frontends.moshi.bundle import load_bundle  # noqa: E402
from tandem.frontends.moshi.model import build_lm, load_lm  # noqa: E402
from tandem.frontends.moshi.tiny import TINY_CARD, tiny_lm_kwargs, write_tiny_checkpoint  # noqa: E402

torch.set_num_threads(1)
VOCAB = 120
KW = tiny_lm_kwargs(text_card=VOCAB)


@pytest.fixture(scope="module")
def kame_dir(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("kame"), seed=0, vocab=VOCAB)


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory):
    """A plain Moshi checkpoint (no oracle_emb): moshi's own loader reads it strictly."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("plain"), seed=1, vocab=VOCAB, plain_moshi=True)


def _codes(B: int = 2, T: int = 12) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.cat([torch.randint(0, VOCAB, (B, 1, T), generator=g),
                      torch.randint(0, TINY_CARD, (B, KW["n_q"], T), generator=g)], dim=1)


def _assert_same_state(model: torch.nn.Module, ref: dict[str, torch.Tensor], skip_oracle: bool = False) -> None:
    sd = {k: v for k, v in model.state_dict().items() if not (skip_oracle and k.startswith("oracle_emb."))}
    assert set(sd) == set(ref)
    for k, v in ref.items():
        assert torch.equal(sd[k], v), k


def _same_logits(ours: torch.nn.Module, ref: torch.nn.Module) -> None:
    """Our model with no oracle attached against moshi's: the same outputs, bit for bit."""
    with torch.no_grad():
        a, b = ours.forward(_codes()), ref.forward(_codes())
    torch.testing.assert_close(a.text_logits, b.text_logits, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(a.logits, b.logits, rtol=0, atol=0, equal_nan=True)


def _moshi_info(d: Path, config: Path | None = None, **paths: Path) -> loaders.CheckpointInfo:
    """moshi's own CheckpointInfo for a directory, every file given as a local Path (no hub)."""
    return loaders.CheckpointInfo.from_hf_repo(
        "nobody/unused", moshi_weights=d / "model.safetensors", mimi_weights=d / "mimi.safetensors",
        tokenizer=d / "tokenizer.model", config_path=config or d / "config.json",
        mimi_config_path=d / "mimi_config.json", **paths)


def _edit_config(d: Path, **changes) -> dict:
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))
    return cfg


class FakeHub:
    """huggingface_hub.hf_hub_download over a dict {(repo, path): local file}; hub unreachable."""

    def __init__(self, monkeypatch, files: dict[tuple[str, str], Path]) -> None:
        import huggingface_hub

        self.files, self.calls = files, []
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", self)
        monkeypatch.setattr(loaders, "hf_hub_download", self)  # moshi imported it by name
        monkeypatch.setattr(checkpoint, "hub_reachable", lambda *a, **k: False)

    def __call__(self, repo, filename, revision=None, local_files_only=False, **kw):
        self.calls.append((repo, filename))
        if (repo, filename) not in self.files:
            raise FileNotFoundError(f"{repo}/{filename} not cached")
        return str(self.files[(repo, filename)])


# -- 1. hf:// and file:// names ---------------------------------------------------------------------
def test_hf_and_file_names_in_config_resolve_as_moshi_resolves_them(kame_dir, tmp_path, monkeypatch):
    d = tmp_path / "ck"
    shutil.copytree(kame_dir, d)
    hub_lm = tmp_path / "hubcache" / "model.safetensors"
    hub_lm.parent.mkdir()
    shutil.move(d / "model.safetensors", hub_lm)
    (tmp_path / "tok").mkdir()
    shutil.move(d / "tokenizer.model", tmp_path / "tok" / "tokenizer.model")
    mimi_abs = tmp_path / "elsewhere" / "mimi.safetensors"
    mimi_abs.parent.mkdir()
    shutil.move(d / "mimi.safetensors", mimi_abs)
    names = {"moshi_name": "hf://someone/tiny-lm/weights/model.safetensors",
             "mimi_name": f"file://{mimi_abs}",            # absolute
             "tokenizer_name": "file://tok/tokenizer.model"}  # relative: to the working directory, as moshi
    _edit_config(d, **names)
    monkeypatch.chdir(tmp_path)
    hub = FakeHub(monkeypatch, {("someone/tiny-lm", "weights/model.safetensors"): hub_lm})

    files = checkpoint.from_dir(d)
    assert (files.lm, files.mimi, files.tokenizer.resolve()) == (hub_lm, mimi_abs, tmp_path / "tok" / "tokenizer.model")
    for got, key in ((files.lm, "moshi_name"), (files.mimi, "mimi_name"), (files.tokenizer, "tokenizer_name")):
        assert got == loaders.hf_get(names[key], "someone/unused"), key  # moshi's own resolution
    assert ("someone/tiny-lm", "weights/model.safetensors") in hub.calls
    b = load_bundle(files)
    _assert_same_state(b.lm, load_file(str(hub_lm)))

    # the same names in a hub repository's config.json
    hub.files[("someone/tiny", "config.json")] = d / "config.json"
    hub.files[("someone/tiny", "mimi_config.json")] = d / "mimi_config.json"
    from_hub = checkpoint.resolve(hf_repo="someone/tiny")
    assert (from_hub.lm, from_hub.mimi, from_hub.tokenizer) == (files.lm, files.mimi, files.tokenizer)

    # a relative file:// name missing from the working directory is also looked for beside config.json
    (d / "tok").mkdir()
    shutil.copy(tmp_path / "tok" / "tokenizer.model", d / "tok" / "moved.model")
    _edit_config(d, tokenizer_name="file://tok/moved.model")
    assert checkpoint.from_dir(d).tokenizer == d / "tok" / "moved.model"
    # an hf:// file that cannot be had is named in the one error
    _edit_config(d, moshi_name="hf://someone/missing/model.safetensors")
    with pytest.raises(FrontEndUnavailable, match="LM weights .*could not fetch model.safetensors.*someone/missing"):
        checkpoint.from_dir(d)


# -- 2. LoRA ----------------------------------------------------------------------------------------
def _write_lora(d: Path, rank: int = 4, scaling: float = 1.5, seed: int = 5) -> Path:
    """A moshi LoRA adapter for the tiny LM: lora_A / lora_B for every linear layer, as moshi names them."""
    from moshi.modules.lora import replace_all_linear_with_lora

    torch.manual_seed(seed)
    m = LMModel(**KW)
    replace_all_linear_with_lora(m, rank, scaling)
    adapter = {k: torch.randn_like(v) * 0.1 for k, v in m.state_dict().items() if ".lora_" in k}
    save_file(adapter, str(d / "lora.safetensors"))
    _edit_config(d, lora=True, lora_rank=rank, lora_scaling=scaling, lora_name="lora.safetensors")
    return d / "lora.safetensors"


def test_a_lora_config_loads_with_its_adapter_merged_as_moshi_does(plain_dir, tmp_path, caplog):
    d = tmp_path / "lora"
    shutil.copytree(plain_dir, d)
    lora = _write_lora(d)
    files = checkpoint.from_dir(d)
    assert files.lora == lora
    b = load_bundle(files)
    ref = _moshi_info(d, lora_weights=lora).get_moshi(device="cpu", dtype=torch.float32, fuse_lora=True)
    _assert_same_state(b.lm, ref.state_dict(), skip_oracle=True)
    _same_logits(b.lm, ref)
    base = load_file(str(d / "model.safetensors"))
    w = "transformer.layers.0.gating.linear_in.weight"
    assert not torch.equal(b.lm.state_dict()[w], base[w])  # the adapter changed the weights
    assert torch.equal(b.lm.oracle_emb.weight, base["text_emb.weight"])  # backfilled from the base text_emb
    # an adapter without lora: true is refused, as moshi refuses it
    _edit_config(d, lora=False)
    with pytest.raises(FrontEndUnavailable, match="lora: true"):
        load_bundle(checkpoint.from_dir(d))
    # lora: true without an adapter: the base as it is, with a warning (moshi would add random adapters)
    cfg = _edit_config(d, lora=True)
    del cfg["lora_name"]
    (d / "config.json").write_text(json.dumps(cfg))
    with caplog.at_level(logging.WARNING):
        plain = load_bundle(checkpoint.from_dir(d))
    assert "names no adapter" in caplog.text
    _assert_same_state(plain.lm, base, skip_oracle=True)


def test_saving_a_merged_model_drops_the_lora_arguments(plain_dir, tmp_path):
    """The weights we write are merged: a config still saying lora would make moshi add random adapters."""
    d = tmp_path / "lora"
    shutil.copytree(plain_dir, d)
    _write_lora(d)
    b = load_bundle(checkpoint.from_dir(d))
    out = checkpoint.save(tmp_path / "out", b.lm, b.files.lm_kwargs, b.files.mimi, b.files.tokenizer,
                          mimi_config=b.files.mimi_config)
    cfg = json.loads((out / "config.json").read_text())
    assert not {"lora", "lora_rank", "lora_scaling", "lora_name"} & set(cfg)
    _assert_same_state(load_bundle(checkpoint.from_dir(out)).lm, b.lm.state_dict())


# -- 3. lm_gen_config -------------------------------------------------------------------------------
def test_every_lmgen_argument_in_lm_gen_config_is_kept(kame_dir, tmp_path, caplog):
    from tandem.frontends.moshi import _cache, make_front_end
    import inspect

    from tandem.frontends.moshi.frontend import FIXED, NOT_FROM_CONFIG, Sampling

    lmgen_args = set(inspect.signature(LMGen.__init__).parameters) - {"self", "lm_model"}
    assert set(Sampling.__dataclass_fields__) | FIXED | NOT_FROM_CONFIG == lmgen_args  # nothing left out
    d = tmp_path / "gen"
    shutil.copytree(kame_dir, d)
    gen_cfg = {"temp": 0.6, "top_k_text": 10, "use_sampling": False, "check": True, "cfg_coef": 1.0,
               "cfg_is_no_text": True, "cfg_is_masked_until": [2], "support_out_of_sync": False, "no_such_key": 1}
    _edit_config(d, lm_gen_config=gen_cfg)
    _cache.clear()
    with caplog.at_level(logging.WARNING):
        fe = make_front_end(moshi_weights=d, device="cpu", top_k=7)
    g = fe.gen
    assert (g.temp, g.top_k_text, g.use_sampling, g.check, g.cfg_is_no_text, g.cfg_is_masked_until) == \
        (0.6, 10, False, True, True, [2])
    assert g.top_k == 7 and g.temp_text == 0.7  # the caller's setting wins; LMGen's default otherwise
    assert g.support_out_of_sync  # needed for per-slot resets
    assert "no_such_key" in caplog.text and "support_out_of_sync" not in caplog.text
    fe.close()
    _cache.clear()


# -- 4. kame_finetune exports -----------------------------------------------------------------------
def _kame_finetune_dir(d: Path, kame_dir: Path, oracle: bool = True, exposed: bool = False) -> dict:
    """kame_finetune's tools/clean_moshi.py output: model.safetensors + moshi_lm_kwargs.json (the LM's
    constructor arguments and nothing else); `exposed` is its training model's naming (init_moshi_for_ft)."""
    d.mkdir()
    torch.manual_seed(3)
    lm = build_lm(KW)
    with torch.no_grad():
        lm.oracle_emb.weight.normal_()  # trained apart from text_emb ("separate" mode)
    sd = {k: v.contiguous() for k, v in lm.state_dict().items() if oracle or not k.startswith("oracle_emb.")}
    if exposed:
        sd = {re.sub(r"(\.gating(?:\.\d+)?)\.linear_(in|out)\.weight$", r"\1.linear_\2_weight", k): v
              for k, v in sd.items()}
        assert any(k.endswith("gating.0.linear_in_weight") for k in sd)
    save_file(sd, str(d / "model.safetensors"))
    (d / "moshi_lm_kwargs.json").write_text(json.dumps(KW, indent=4))
    for name in ("tokenizer.model", "mimi.safetensors"):
        shutil.copy(kame_dir / name, d / name)
    return lm.state_dict()


@pytest.mark.parametrize("oracle,exposed", [(True, False), (False, False), (True, True)])
def test_a_kame_finetune_export_loads(kame_dir, tmp_path, oracle, exposed):
    source = _kame_finetune_dir(tmp_path / "ft", kame_dir, oracle=oracle, exposed=exposed)
    files = checkpoint.from_dir(tmp_path / "ft")
    assert files.lm_kwargs == KW and files.lm.name == "model.safetensors"
    lm, backfilled = load_lm(files.lm, files.lm_kwargs)
    assert backfilled == (not oracle)
    if oracle:
        _assert_same_state(lm, source)
    else:
        _assert_same_state(lm, {k: v for k, v in source.items() if not k.startswith("oracle_emb.")}, skip_oracle=True)
        assert torch.equal(lm.oracle_emb.weight, source["text_emb.weight"])


def test_a_kame_finetune_export_takes_mimi_and_the_tokenizer_from_a_warm_cache(kame_dir, tmp_path, monkeypatch):
    _kame_finetune_dir(tmp_path / "ft", kame_dir)
    for name in ("tokenizer.model", "mimi.safetensors"):
        (tmp_path / "ft" / name).unlink()
    cache = {(checkpoint.MOSHI_HF_REPO, checkpoint.MIMI_NAME): kame_dir / "mimi.safetensors",
             (checkpoint.MOSHI_HF_REPO, checkpoint.TOKENIZER_NAME): kame_dir / "tokenizer.model"}
    FakeHub(monkeypatch, cache)
    files = checkpoint.from_dir(tmp_path / "ft")
    assert (files.mimi, files.tokenizer) == (kame_dir / "mimi.safetensors", kame_dir / "tokenizer.model")


# -- 5. .pt LM files --------------------------------------------------------------------------------
@pytest.mark.parametrize("nesting", ["flat", "model", "state_dict", "fsdp_best_state", "ddp"])
def test_a_torch_pt_lm_file_loads(kame_dir, tmp_path, nesting):
    d = tmp_path / "pt"
    shutil.copytree(kame_dir, d)
    sd = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    obj = {"flat": sd, "model": {"model": sd, "epoch": 3}, "state_dict": {"state_dict": sd, "step": 10},
           "fsdp_best_state": {"fsdp_best_state": {"model": sd}},  # moshi's own .pt layout
           "ddp": {"model": {f"module.{k}": v for k, v in sd.items()}}}[nesting]
    torch.save(obj, d / "model.pt")
    _edit_config(d, moshi_name="model.pt")
    b = load_bundle(checkpoint.from_dir(d))
    _assert_same_state(b.lm, sd)
    # without a name in config.json, the directory's one .pt file is taken
    cfg = json.loads((d / "config.json").read_text())
    del cfg["moshi_name"]
    (d / "config.json").write_text(json.dumps(cfg))
    assert checkpoint.from_dir(d).lm == d / "model.pt"


def test_a_pt_file_of_pickled_objects_is_refused_in_one_line(kame_dir, tmp_path):
    d = tmp_path / "pt"
    shutil.copytree(kame_dir, d)
    torch.save({"model": FrontEndUnavailable("not a tensor")}, d / "model.pt")
    _edit_config(d, moshi_name="model.pt")
    with pytest.raises(FrontEndUnavailable, match="model.pt is not a plain torch state dict"):
        load_bundle(checkpoint.from_dir(d))


# -- 6. tandem's own checkpoints --------------------------------------------------------------------
def test_our_training_record_is_kept_where_moshi_ignores_it(plain_dir, tmp_path):
    from tandem.train.moshi.data import ToneRenderer, read_shards
    from tandem.train.moshi.train import MoshiTrainConfig, prepare_data, train_moshi

    files = checkpoint.from_dir(plain_dir)
    prepare_data(files, tmp_path / "data", n=2, seed=0, renderer=ToneRenderer())
    cfg = MoshiTrainConfig(lr=3e-3, max_steps=1, batch=1, frames=20, seed=0)
    train_moshi(files, read_shards(tmp_path / "data"), cfg, tmp_path / "ck", progress=False)
    d = tmp_path / "ck"
    assert "tandem_training" not in json.loads((d / "config.json").read_text())
    assert json.loads((d / checkpoint.TRAINING_NAME).read_text())["steps"] == 1
    # moshi's own loader reads the config (KAME's, which knows oracle_emb, would read the weights as
    # they are; moshi's plain LMModel takes them without it)
    info = _moshi_info(d)
    ref = loaders.get_moshi_lm(None, lm_kwargs=info.lm_config, dtype=torch.float32)
    ours = load_bundle(checkpoint.from_dir(d)).lm
    sd = load_file(str(d / "model.safetensors"))
    ref.load_state_dict({k: v for k, v in sd.items() if not k.startswith("oracle_emb.")}, strict=True)
    _assert_same_state(ours, ref.state_dict(), skip_oracle=True)
    _same_logits(ours, ref)
    # a checkpoint written before the record moved out still loads, its key kept from the LM
    old = _edit_config(d, tandem_training={"steps": 1})
    assert "tandem_training" in old
    files = checkpoint.from_dir(d)
    assert "tandem_training" not in files.lm_kwargs
    _assert_same_state(load_bundle(files).lm, ours.state_dict())
