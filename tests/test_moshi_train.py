"""`tandem train moshi`: the training layout and a few steps on the tiny model (its simulated
oracles, shared with the compact recipe: tests/test_train_oracles.py)."""
import os

os.environ.setdefault("NO_TORCH_COMPILE", "1")

import random

import numpy as np
import pytest
import torch

pytest.importorskip("moshi")

from moshi.models import LMGen  # noqa: E402

from tandem.frontends.moshi import checkpoint  # noqa: E402
from tandem.frontends.moshi.bundle import load_bundle  # noqa: E402
from tandem.frontends.moshi.model import OracleLMModel  # noqa: E402
from tandem.frontends.moshi.tiny import TINY_CARD, tiny_lm_kwargs, write_tiny_checkpoint  # noqa: E402
from tandem.train.moshi.data import (ToneRenderer, build_moshi_example, read_shards,  # noqa: E402
                                     render_synthetic, text_columns, turns_from_words)
from tandem.train.moshi.train import MoshiTrainConfig, prepare_data, train_moshi  # noqa: E402
from tandem.train.synth import Word, make_dialogue  # noqa: E402

torch.set_num_threads(1)
VOCAB = 120


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=0, vocab=VOCAB)


@pytest.fixture(scope="module")
def shards(tiny_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    prepare_data(checkpoint.from_dir(tiny_dir), d, n=4, seed=0, renderer=ToneRenderer())
    return d


# -- the training layout ------------------------------------------------------------------------------
def test_text_columns_put_words_at_their_frames_with_end_of_padding():
    enc = {"hello": [50], " big": [51, 52], " world": [53]}.__getitem__
    words = [Word("hello", 0.40, 0.6), Word("big", 0.64, 0.8), Word("world", 1.2, 1.5)]
    cols = text_columns(words, 20, enc, pad_id=3, end_pad_id=0)
    # hello at frame 5, big pushed to frames 8-9 (frame_of 0.64 = 8), world at 15; EPAD before each word
    assert cols.tolist() == [3, 3, 3, 3, 0, 50, 3, 0, 51, 52, 3, 3, 3, 3, 0, 53, 3, 3, 3, 3]


def test_turns_from_real_word_timestamps():
    user = [Word("what", 0.5, 0.7), Word("time", 0.8, 1.0), Word("thanks", 4.0, 4.3)]
    asst = [Word("it", 1.5, 1.6), Word("is", 1.7, 1.8), Word("noon", 1.9, 2.2), Word("welcome", 4.6, 5.0)]
    turns = turns_from_words(user, asst)
    assert [t.text for t in turns] == ["what time", "thanks"]
    assert [t.reply for t in turns] == ["it is noon", "welcome"]


def test_shards_have_moshi_layout(shards, tiny_dir):
    ex = read_shards(shards)
    assert len(ex) == 4
    for e in ex:
        K, T = e["codes"].shape
        assert K == 1 + 2 * 3 and e["oracle"].shape == (T,)
        assert e["codes"][1:].min() >= 0 and e["codes"][1:].max() < TINY_CARD
        assert (e["oracle"] == VOCAB).any(), "oracle events start with the text start token"
        assert ((e["codes"][0] != 3) & (e["codes"][0] != 0)).any(), "the assistant says something"


def test_user_stream_is_shifted_one_frame_as_lmgen_hears_it():
    """Training forward on data laid out like build_moshi_example == LMGen's step-by-step logits."""
    kw = tiny_lm_kwargs(VOCAB)
    torch.manual_seed(0)
    lm = OracleLMModel(**kw).eval()
    with torch.no_grad():
        lm.oracle_emb.weight.normal_()
    T = 12
    g = torch.Generator().manual_seed(1)
    user = torch.randint(0, TINY_CARD, (1, 3, T + 1), generator=g)  # user frames fed at steps 0..T
    fed = torch.randint(0, VOCAB + 1, (1, T + 1), generator=g)  # oracle token fed at each step
    logits, outs = [], []
    gen = LMGen(lm, use_sampling=False, on_text_logits_hook=lambda x: logits.append(x[0, 0, 0].clone()))
    buf = torch.zeros(1, 1, dtype=torch.long)
    lm.attach_oracle(buf)
    with gen.streaming(1):
        for k in range(T + 1):
            buf.copy_(fed[:, k:k + 1])
            o = gen.step(user[:, :, k:k + 1])
            if o is not None:
                outs.append(o)
    lm.attach_oracle(None)
    gen_cols = torch.cat(outs, dim=2)  # text + audio of columns 0..T-1
    codes = torch.cat([gen_cols[:, :, :T], user[:, :, 1:T + 1]], dim=1)  # user column c <- frame c + 1
    with torch.no_grad():
        out = lm(codes, oracle_tokens=fed[:, 1:T + 1])  # oracle column c <- token fed at step c + 1
    for c in range(T):
        torch.testing.assert_close(out.text_logits[0, 0, c], logits[c], atol=1e-4, rtol=1e-4)


# -- training ---------------------------------------------------------------------------------------
def test_a_few_full_fine_tuning_steps_lower_the_loss_and_write_a_loadable_checkpoint(tiny_dir, shards, tmp_path):
    files = checkpoint.from_dir(tiny_dir)
    cfg = MoshiTrainConfig(lr=3e-3, max_steps=30, batch=2, frames=40, seed=0)
    meta = train_moshi(files, read_shards(shards), cfg, tmp_path / "ck", progress=False)
    assert meta["steps"] == 30
    assert meta["last_loss"] < 0.6 * meta["first_loss"], meta
    base = load_bundle(files)
    b = load_bundle(checkpoint.from_dir(tmp_path / "ck"))
    assert not b.backfilled
    assert not torch.equal(b.lm.oracle_emb.weight, base.lm.oracle_emb.weight)
    assert not torch.equal(b.lm.text_emb.weight, base.lm.text_emb.weight)


def test_lora_trains_adapters_and_the_oracle_embedding_only(tiny_dir, shards, tmp_path):
    files = checkpoint.from_dir(tiny_dir)
    cfg = MoshiTrainConfig(lr=3e-3, max_steps=30, batch=2, frames=40, seed=0, lora=True, lora_rank=4)
    meta = train_moshi(files, read_shards(shards), cfg, tmp_path / "lora", progress=False)
    assert meta["last_loss"] < 0.8 * meta["first_loss"], meta
    base = load_bundle(files)
    b = load_bundle(checkpoint.from_dir(tmp_path / "lora"))
    assert set(b.lm.state_dict()) == set(base.lm.state_dict())  # merged: plain names, no lora_* keys
    assert torch.equal(b.lm.text_emb.weight, base.lm.text_emb.weight)  # frozen
    assert not torch.equal(b.lm.oracle_emb.weight, base.lm.oracle_emb.weight)  # trained
    w = "transformer.layers.0.gating.linear_in.weight"
    assert not torch.equal(b.lm.state_dict()[w], base.lm.state_dict()[w])  # adapter folded in


def test_tandem_train_moshi_tiny_from_the_command_line(tmp_path):
    from tandem.cli import main

    rc = main(["train", "moshi", "--tiny", "--out", str(tmp_path), "--max-steps", "3", "--minutes", "2"])
    assert rc == 0
    assert (tmp_path / "checkpoint" / "config.json").exists() and (tmp_path / "data" / "shards.json").exists()
    load_bundle(checkpoint.from_dir(tmp_path / "checkpoint"))


def test_synthetic_dialogue_render_keeps_the_word_times():
    rng = random.Random(3)
    d = render_synthetic(make_dialogue(rng), ToneRenderer(), rng)
    assert len(d.user) == len(d.assistant) and len(d.user) % 1920 == 0
    for w in d.user_words[:3]:
        seg = d.user[int(w.start * 24000):int(w.end * 24000)]
        assert np.abs(seg).max() > 0.05
    assert d.assistant_words[0].start > d.turns[0].end


def test_real_dialogues_from_a_manifest(tiny_dir, tmp_path):
    """Stereo file + word timestamps -> the same example layout as synthetic dialogues."""
    import json

    import soundfile as sf

    from tandem.frontends.moshi.tiny import tiny_mimi
    from tandem.frontends.moshi.tokenizer import MoshiTokenizer
    from tandem.train.moshi.data import read_manifest

    sr = 16000  # any rate: resampled to 24 kHz
    t = np.arange(4 * sr) / sr
    user = np.where(t < 1.5, 0.3 * np.sin(2 * np.pi * 200 * t), 0)
    asst = np.where((t > 2.0) & (t < 3.5), 0.3 * np.sin(2 * np.pi * 300 * t), 0)
    sf.write(tmp_path / "d.wav", np.stack([asst, user], 1).astype(np.float32), sr)
    rec = {"audio": "d.wav", "user_channel": 1,
           "user_words": [["what", 0.2, 0.6], ["time", 0.7, 1.4]],
           "assistant_words": [["it", 2.0, 2.2], ["is", 2.3, 2.5], ["noon", 2.6, 3.4]]}
    (tmp_path / "m.jsonl").write_text(json.dumps(rec) + "\n")
    (d,) = list(read_manifest(tmp_path / "m.jsonl"))
    assert len(d.user) == 4 * 24000 and np.abs(d.user[: 24000]).max() > 0.2 and np.abs(d.user[60000:]).max() < 1e-3
    assert d.turns[0].reply == "it is noon"
    tok = MoshiTokenizer(tiny_dir / "tokenizer.model", start_id=VOCAB)
    ex = build_moshi_example(d, tiny_mimi(), tok, 3, random.Random(0))
    assert ex["codes"].shape == (7, 50) and ex["oracle"].shape == (50,)
    assert ex["codes"][0, 25] not in (0, 3), "the assistant's first word starts at frame int(2.0 * 12.5)"
    assert (ex["oracle"] == VOCAB).any()


def test_voice_renderer_fits_each_word_into_its_slot():
    from tandem.train.moshi.data import VoiceRenderer

    class Tone:
        def synthesize(self, text):
            return np.full(24000, 0.1, np.float32)  # 1 s, longer than any slot

    r = VoiceRenderer(user_voice="flite", assistant_tts=Tone())
    a = r.render("capital", 0.3, "assistant")
    assert len(a) == int(0.3 * 24000)
    u = r.render("Paris?", 0.5, "user")
    assert 0 < len(u) <= int(0.5 * 24000) and np.abs(u).max() > 0.01
    assert r.render("paris", 0.5, "user") is not None and len(r._cache) == 2  # cached by cleaned word


def test_mixed_precision_lora_keeps_fp32_adapters_over_a_bf16_base(tiny_dir, shards, tmp_path):
    files = checkpoint.from_dir(tiny_dir)
    cfg = MoshiTrainConfig(lr=3e-3, max_steps=20, batch=2, frames=40, seed=0, lora=True, lora_rank=4,
                           mixed_precision=True)
    meta = train_moshi(files, read_shards(shards), cfg, tmp_path / "mp", dtype="bf16", progress=False)
    assert meta["last_loss"] < 0.8 * meta["first_loss"], meta
    assert meta["trainable_dtypes"] == ["torch.float32"] and meta["frozen_dtypes"] == ["torch.bfloat16"]
    b = load_bundle(checkpoint.from_dir(tmp_path / "mp"))
    assert torch.isfinite(b.lm.oracle_emb.weight).all()
