"""The moshi front-end's model: moshi on torch 2.13, the oracle embedding, checkpoints.

Tiny random models built from constructor arguments; nothing is downloaded.
"""
import os

os.environ.setdefault("NO_TORCH_COMPILE", "1")  # before moshi is imported: no compiler workers on a CPU

import json
import shutil

import pytest
import torch

pytest.importorskip("moshi")

from moshi.models import LMGen, LMModel  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from tandem.runtime.errors import FrontEndUnavailable  # noqa: E402
from tandem.frontends.moshi import checkpoint  # noqa: E402
from tandem.frontends.moshi.bundle import load_bundle  # noqa: E402
from tandem.frontends.moshi.model import OracleLMModel, backfill_oracle, build_lm, load_lm  # noqa: E402
from tandem.frontends.moshi.tiny import TINY_CARD, tiny_lm_kwargs, write_tiny_checkpoint  # noqa: E402

torch.set_num_threads(1)
VOCAB = 120
KW = tiny_lm_kwargs(text_card=VOCAB)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=0, vocab=VOCAB)


def _pair(seed: int = 7) -> tuple[LMModel, OracleLMModel]:
    torch.manual_seed(seed)
    plain = LMModel(**KW).eval()
    torch.manual_seed(seed)
    ext = OracleLMModel(**KW).eval()
    return plain, ext


def _codes(B: int, T: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(0, VOCAB, (B, 1, T), generator=g)
    audio = torch.randint(0, TINY_CARD, (B, KW["n_q"], T), generator=g)
    return torch.cat([text, audio], dim=1)


def test_moshi_runs_on_this_torch():
    import moshi

    assert torch.__version__.startswith("2.13"), torch.__version__
    assert moshi.__version__ == "0.2.13"
    _, ext = _pair()
    out = ext.forward(_codes(2, 12))
    assert out.logits.shape == (2, KW["dep_q"], 12, TINY_CARD)
    assert out.text_logits.shape == (2, 1, 12, VOCAB)


def test_oracle_embedding_is_a_copy_of_the_text_embedding_with_kame_names():
    plain, ext = _pair()
    sd = ext.state_dict()
    assert sd["oracle_emb.weight"].shape == (VOCAB + 1, KW["dim"])  # text vocabulary + the start token
    assert torch.equal(sd["oracle_emb.weight"], sd["text_emb.weight"])
    assert sd["oracle_emb.weight"].data_ptr() != sd["text_emb.weight"].data_ptr()  # a copy, not shared
    # everything else is exactly moshi's model, parameter for parameter
    assert set(sd) - set(plain.state_dict()) == {"oracle_emb.weight"}
    for k, v in plain.state_dict().items():
        assert torch.equal(v, sd[k]), k


def test_zeroed_oracle_changes_nothing_in_training_forward():
    plain, ext = _pair()
    with torch.no_grad():
        ext.oracle_emb.weight.zero_()
    codes = _codes(2, 16)
    oracle = torch.randint(0, VOCAB + 1, (2, 16))
    with torch.no_grad():
        a, b = plain.forward(codes), ext.forward(codes, oracle_tokens=oracle)
    torch.testing.assert_close(b.text_logits, a.text_logits, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(b.logits, a.logits, rtol=0, atol=0, equal_nan=True)


def test_oracle_changes_the_text_path_only_from_the_next_step():
    _, ext = _pair()
    codes = _codes(1, 10)
    o1 = torch.full((1, 10), 3)
    o2 = o1.clone()
    o2[0, 4] = 50  # column 4 is fed with the input that predicts column 5
    with torch.no_grad():
        a, b = ext.forward(codes, oracle_tokens=o1), ext.forward(codes, oracle_tokens=o2)
    assert torch.equal(a.text_logits[:, :, :5], b.text_logits[:, :, :5])
    assert not torch.allclose(a.text_logits[:, :, 5], b.text_logits[:, :, 5])


def _generate(lm, user: torch.Tensor, oracle: torch.Tensor | None, seed: int = 3, sampling: bool = True):
    gen = LMGen(lm, use_sampling=sampling)
    B, _, T = user.shape
    buf = torch.full((B, 1), 3, dtype=torch.long) if oracle is not None else None
    if isinstance(lm, OracleLMModel):
        lm.attach_oracle(buf)
    outs = []
    torch.manual_seed(seed)
    with gen.streaming(B):
        for t in range(T):
            if buf is not None:
                buf.copy_(oracle[:, t:t + 1])
            o = gen.step(user[:, :, t:t + 1])
            if o is not None:
                outs.append(o)
    if isinstance(lm, OracleLMModel):
        lm.attach_oracle(None)
    return torch.cat(outs, dim=2)


def test_zeroed_oracle_changes_nothing_when_streaming_with_sampling():
    plain, ext = _pair()
    with torch.no_grad():
        ext.oracle_emb.weight.zero_()
    user = torch.randint(0, TINY_CARD, (2, KW["dep_q"], 14))
    oracle = torch.randint(0, VOCAB + 1, (2, 14))
    assert torch.equal(_generate(plain, user, None), _generate(ext, user, oracle))


def test_oracle_tokens_are_per_batch_element():
    _, ext = _pair()
    user = torch.randint(0, TINY_CARD, (2, KW["dep_q"], 14), generator=torch.Generator().manual_seed(5))
    o_a = torch.full((2, 14), 3)
    o_b = o_a.clone()
    o_b[0, 2:9] = torch.arange(10, 17)  # only element 0's oracle differs
    a = _generate(ext, user, o_a, sampling=False)
    b = _generate(ext, user, o_b, sampling=False)
    assert torch.equal(a[1], b[1]), "element 1 must not hear element 0's oracle"
    assert not torch.equal(a[0], b[0]), "element 0 hears its own oracle"


def test_save_and_load_round_trip_with_kame_names(tiny_dir, tmp_path):
    b = load_bundle(checkpoint.from_dir(tiny_dir))
    assert not b.backfilled
    with torch.no_grad():  # make the oracle embedding distinct from the text embedding
        b.lm.oracle_emb.weight.normal_()
    out = checkpoint.save(tmp_path / "ck", b.lm, KW, b.files.mimi, b.files.tokenizer, mimi_config=b.files.mimi_config)
    keys = set(load_file(str(out / "model.safetensors")))
    assert {"oracle_emb.weight", "text_emb.weight"} <= keys
    assert json.loads((out / "config.json").read_text())["moshi_name"] == "model.safetensors"
    b2 = load_bundle(checkpoint.from_dir(out))
    assert not b2.backfilled
    s1, s2 = b.lm.state_dict(), b2.lm.state_dict()
    assert set(s1) == set(s2)
    for k in s1:
        assert torch.equal(s1[k], s2[k]), k


def test_a_moshi_state_dict_loads_with_the_oracle_copied_from_text(tmp_path):
    d = write_tiny_checkpoint(tmp_path / "plain", seed=1, vocab=VOCAB, plain_moshi=True)
    state = load_file(str(d / "model.safetensors"))
    assert not any(k.startswith("oracle_emb") for k in state)
    # it is a real Moshi checkpoint: moshi's own loader takes it strictly
    from moshi.models.loaders import get_moshi_lm

    get_moshi_lm(d / "model.safetensors", lm_kwargs=KW, dtype=torch.float32)
    b = load_bundle(checkpoint.from_dir(d))
    assert b.backfilled
    assert torch.equal(b.lm.oracle_emb.weight, b.lm.text_emb.weight)
    assert torch.equal(b.lm.text_emb.weight, state["text_emb.weight"])
    # the dict-level helper does the same and leaves KAME dicts alone
    sd = dict(state)
    assert backfill_oracle(sd) and torch.equal(sd["oracle_emb.weight"], sd["text_emb.weight"])
    assert not backfill_oracle(sd)


def test_dtype_and_device_options(tiny_dir):
    b = load_bundle(checkpoint.from_dir(tiny_dir), device="cpu", dtype="bf16")
    assert b.lm.text_emb.weight.dtype == torch.bfloat16 and b.lm.oracle_emb.weight.dtype == torch.bfloat16
    assert next(b.mimi.parameters()).dtype == torch.float32  # Mimi stays float32
    assert checkpoint.parse_dtype(None, "cpu") == torch.float32
    assert checkpoint.parse_dtype("auto", "cuda") == torch.bfloat16
    with pytest.raises(ValueError):
        checkpoint.parse_dtype("int3", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(FrontEndUnavailable, match="no CUDA device"):
            load_bundle(checkpoint.from_dir(tiny_dir), device="cuda")


def test_missing_or_partial_checkpoint_gives_one_clear_error(tiny_dir, tmp_path):
    with pytest.raises(FrontEndUnavailable, match="no such directory.*huggingface-cli download SakanaAI/kame"):
        checkpoint.from_dir(tmp_path / "nowhere")
    part = tmp_path / "partial"
    part.mkdir()
    shutil.copy(tiny_dir / "config.json", part)
    shutil.copy(tiny_dir / "model.safetensors", part)
    with pytest.raises(FrontEndUnavailable) as e:
        checkpoint.from_dir(part)
    msg = str(e.value)
    assert "tokenizer.model" in msg and "mimi.safetensors" in msg and "mimi_config.json" in msg
    assert "model.safetensors" not in msg.split("missing")[1].split(";")[0]
    assert "--moshi-weights" in msg
    # the LM weights do not match the config: a wrong-size model
    wrong = tmp_path / "wrong"
    shutil.copytree(tiny_dir, wrong)
    cfg = json.loads((wrong / "config.json").read_text())
    cfg["dim"] = 48
    (wrong / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FrontEndUnavailable, match="do not fit the LM config"):
        load_bundle(checkpoint.from_dir(wrong))
    # a truncated state dict: keys are named
    with pytest.raises(ValueError, match="missing: .*transformer"):
        state = {k: v for k, v in build_lm(KW).state_dict().items() if not k.startswith("transformer.layers.1")}
        load_lm(state, KW)


def test_a_legacy_directory_without_config_is_moshi_7b(tmp_path):
    d = tmp_path / "legacy"
    d.mkdir()
    for name in ("model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors", "tokenizer_spm_32k_3.model"):
        (d / name).write_bytes(b"x")
    files = checkpoint.from_dir(d)
    assert files.lm_kwargs is None and files.mimi.name.startswith("tokenizer-")


def test_hub_unreachable_says_how_to_get_the_weights(monkeypatch):
    import huggingface_hub

    def offline(*a, **k):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(FrontEndUnavailable, match="could not fetch model.safetensors.*SakanaAI/kame.*--moshi-weights"):
        checkpoint.resolve(hf_repo=None)


def test_a_config_moshi_does_not_understand_is_one_clear_error(tiny_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["no_such_argument"] = 1
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FrontEndUnavailable, match="does not fit moshi"):
        load_bundle(checkpoint.from_dir(bad))


def test_checkpoint_sampling_defaults_apply(tiny_dir, tmp_path):
    from tandem.frontends.moshi import _cache, make_front_end

    d = tmp_path / "gen"
    shutil.copytree(tiny_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["lm_gen_config"] = {"temp": 0.6, "top_k": 100, "cfg_coef": 1.0}
    (d / "config.json").write_text(json.dumps(cfg))
    _cache.clear()
    fe = make_front_end(moshi_weights=d, device="cpu", temp_text=0.5)
    assert (fe.sampling.temp, fe.sampling.top_k, fe.sampling.temp_text) == (0.6, 100, 0.5)


def test_hub_repo_from_a_warm_cache_needs_no_network(tiny_dir, monkeypatch):
    import huggingface_hub

    def cached(repo, name, revision=None, local_files_only=False):
        assert local_files_only, "a cached file must not go to the network"
        return str(tiny_dir / name)

    def no_probe(*a, **k):
        raise AssertionError("no network probe when everything is cached")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cached)
    monkeypatch.setattr(checkpoint, "hub_reachable", no_probe)
    files = checkpoint.resolve(hf_repo="someone/tiny")
    assert files.source == "hf://someone/tiny" and files.lm == tiny_dir / "model.safetensors"
    assert files.lm_kwargs["dim"] == KW["dim"] and files.mimi_config is not None


def test_unreachable_hub_fails_fast(monkeypatch):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not checkpoint.hub_reachable()
    t = time.perf_counter()
    with pytest.raises(FrontEndUnavailable, match="not reachable"):
        checkpoint.from_hf("SakanaAI/kame")
    assert time.perf_counter() - t < 5
