"""The moshi front-end at run time, with a tiny random checkpoint: oracle feeding, batching, `tandem run`."""
import os

os.environ.setdefault("NO_TORCH_COMPILE", "1")

import json

import numpy as np
import pytest
import torch

pytest.importorskip("moshi")

from tandem.speak import frontend as registry  # noqa: E402
from tandem.audio.frames import FRAME_SAMPLES  # noqa: E402
from tandem.speak.frontend import UserFrame  # noqa: E402
from tandem.frontends.moshi import checkpoint  # noqa: E402
from tandem.frontends.moshi.bundle import load_bundle  # noqa: E402
from tandem.frontends.moshi.frontend import MoshiFrontEnd, Sampling  # noqa: E402
from tandem.frontends.moshi.tiny import write_tiny_checkpoint  # noqa: E402
from tandem.think.oracle import KamePolicy, OracleStream  # noqa: E402

torch.set_num_threads(1)
VOCAB = 120


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=0, vocab=VOCAB)


@pytest.fixture(scope="module")
def bundle(tiny_dir):
    b = load_bundle(checkpoint.from_dir(tiny_dir))
    with torch.no_grad():  # a trained KAME model's oracle embedding is not the text embedding
        b.lm.oracle_emb.weight.normal_()
    return b


def frames(n: int, seed: int = 0) -> list[UserFrame]:
    rng = np.random.default_rng(seed)
    return [UserFrame(audio=(0.1 * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32), vad_prob=0.0,
                      in_speech=False) for _ in range(n)]


def test_registered_and_built_by_name(tiny_dir):
    assert "moshi" in registry.available()
    fe = registry.build("moshi", moshi_weights=tiny_dir, device="cpu", tts=object())
    try:
        assert fe.name == "moshi"
        assert fe.tokenizer.start_id == VOCAB and fe.tokenizer.pad_id == 3
        ids = fe.tokenizer.encode("the capital of France")
        assert ids and fe.tokenizer.decode(ids) == "the capital of France"
        fe.reset()
        outs = [fe.step(u, fe.tokenizer.pad_id) for u in frames(6)]
        for o in outs:
            assert o.audio.shape == (FRAME_SAMPLES,) and o.audio.dtype == np.float32
            assert all(isinstance(p, str) and p for p in o.text)
        assert not outs[0].text and not np.any(outs[0].audio), "acoustic delay: the first frame is silent"
        assert np.any(outs[-1].audio)
    finally:
        fe.close()


def test_oracle_feeding_follows_kame_per_batch_element(bundle):
    """REFERENCE 1.1, checked on the tokens the model's oracle embedding actually received."""
    tok = bundle.tokenizer
    S, P = tok.start_id, tok.pad_id
    fe = MoshiFrontEnd(bundle, batch_size=3, seed=0)
    seen: list[list[int]] = []
    hook = bundle.lm.oracle_emb.register_forward_hook(lambda m, a, out: seen.append(a[0][:, 0].tolist()))
    streams = [OracleStream(S, P, KamePolicy()) for _ in range(3)]
    # (frame, slot, event, tokens): events arrive before their frame's step, as the Session drains them
    events = [
        (2, 0, "reset", []), (2, 0, "append", [10, 11, 12]),          # plain: start pinned at 2, then 1/frame
        (1, 1, "reset", []), (1, 1, "append", [20, 21]),               # replaced at frame 3 by a new oracle
        (3, 1, "reset", []), (3, 1, "append", [30]),
        (1, 2, "reset", []), (1, 2, "append", [40]),                   # late: 41 arrives after its slot (3)
        (4, 2, "append", [41, 42]),
    ]
    try:
        fe.reset()
        for k, u in enumerate(frames(9)):
            for f, slot, kind, ids in events:
                if f == k:
                    (streams[slot].reset(k) if kind == "reset" else streams[slot].append(ids, k))
            fe.step_batch([u, u, u], [s.token(k) for s in streams])
    finally:
        hook.remove()
        fe.close()
    fed = [list(col) for col in zip(*seen)]
    assert fed[0] == [P, P, S, 10, 11, 12, P, P, P]
    assert fed[1] == [P, S, 20, S, 30, P, P, P, P]  # the replacement plays from the frame it came, then PAD
    assert fed[2] == [P, S, 40, P, 42, P, P, P, P]  # 41's slot had passed: never fed (KAME drops it)
    assert streams[2].buf.dropped == 1
    assert [list(x) for x in zip(*fe.fed_oracle)] == fed


def test_batch_slots_are_independent_and_reset_alone(bundle):
    """Greedy decoding: a slot's output depends only on its own inputs, and reset_slot restarts one slot."""
    greedy = Sampling(use_sampling=False)
    us = frames(8, seed=1)
    other = frames(8, seed=2)
    with MoshiFrontEnd(bundle, batch_size=1, sampling=greedy) as solo:
        solo.reset()
        ref = [solo.step(u, 3) for u in us]
    with MoshiFrontEnd(bundle, batch_size=2, sampling=greedy) as fe:
        fe.reset()
        for u, v in zip(other[:5], us):  # slot 1 runs something else first
            fe.step_batch([u, v], [3, 25])
        fe.reset_slot(1)
        got = [fe.step_batch([u, v], [3, 3]) for u, v in zip(us, us)]
    for k in range(8):
        np.testing.assert_allclose(got[k][1].audio, ref[k].audio, atol=1e-5)
        assert got[k][1].text == ref[k].text
    np.testing.assert_allclose(got[-1][0].audio, got[-1][0].audio)  # slot 0 carried on without error


def test_one_model_one_stepping_front_end(bundle):
    a = MoshiFrontEnd(bundle)
    b = MoshiFrontEnd(bundle)  # building is fine (tandem run builds once to check)
    a.reset()
    try:
        with pytest.raises(RuntimeError, match="already stepping"):
            b.reset()
    finally:
        a.close()
    b.reset()  # free again once the first one closed
    b.close()


def test_bad_inputs_are_refused(bundle):
    with MoshiFrontEnd(bundle, batch_size=2) as fe:
        fe.reset()
        with pytest.raises(ValueError, match="exactly 2"):
            fe.step_batch(frames(1), [3])
        with pytest.raises(ValueError, match="outside the text vocabulary"):
            fe.step_batch(frames(2), [3, VOCAB + 5])
        with pytest.raises(RuntimeError, match="batch_size 1"):
            fe.step(frames(1)[0], 3)


def test_tandem_run_with_the_tiny_moshi_writes_the_timeline(tiny_dir, tmp_path, spoken_question):
    """The whole `tandem run --front-end moshi` path: Listener, fake LLM oracles, the tiny model."""
    from fakes import FakeOpenAIServer

    from tandem.audio.frames import write_mono
    from tandem.cli import main

    wav, tl, out = tmp_path / "q.wav", tmp_path / "t.json", tmp_path / "o.wav"
    write_mono(wav, spoken_question)
    with FakeOpenAIServer() as llm:
        rc = main(["run", str(wav), "--mode", "tandem", "--front-end", "moshi", "--moshi-weights", str(tiny_dir),
                   "--moshi-device", "cpu", "--moshi-seed", "1", "--pace", "fast", "--llm-url", llm.url,
                   "--llm-model", "fake", "--timeline", str(tl), "--out", str(out)])
    assert rc == 0
    data = json.loads(tl.read_text())
    n = int(np.ceil(len(spoken_question) / FRAME_SAMPLES))
    assert len(data["frames"]["late_ms"]) >= n - 1
    assert data["meta"]["oracle_tokens_fed"] > 0, "the fake LLM's answer reached the moshi front-end"
    assert {"oracle_reset", "oracle_append"} <= {e["kind"] for e in data["events"]}
    assert out.exists()


def test_pool_serves_sessions_in_slots_and_idle_slots_stand_still(tiny_dir):
    """`tandem serve` shape: one model, a slot per session; a slot not stepped this tick does not move."""
    from tandem.frontends.moshi import _cache
    from tandem.frontends.moshi.pool import MoshiPool

    _cache.clear()
    us = frames(6, seed=3)
    pool = MoshiPool(2, moshi_weights=tiny_dir, device="cpu", use_sampling=False)
    try:
        a = pool.open(None)
        ref = [a.step(u, 3) for u in us]  # session a alone
        a.close()
        a = pool.open(None)
        got, b = [], None
        for k, u in enumerate(us):
            if k == 2:  # a second session joins mid-conversation (its slot is reset)
                b = pool.open(None)
                assert {a.index, b.index} == {0, 1}
            if b is not None and k % 2:  # b is due on odd ticks only; a every tick
                pool.step_many([b], [frames(1, seed=9)[0]], [3])
            got.append(pool.step_many([a], [u], [3])[0])
        for r, g in zip(ref, got):
            np.testing.assert_allclose(g.audio, r.audio, atol=1e-5)
            assert g.text == r.text
        with pytest.raises(Exception, match="in use"):
            pool.open(None)
        b.close()
        assert pool.open(None).index == b.index
    finally:
        pool.close()


def test_tandem_serve_uses_one_pool_for_moshi(tiny_dir):
    """`tandem serve --front-end moshi` gets the batched pool (one model for every session)."""
    from tandem.frontends.moshi.pool import MoshiPool
    from tandem.server.serve import front_end_provider

    provider = front_end_provider("moshi", 2, {"moshi_weights": tiny_dir, "device": "cpu"})
    try:
        assert isinstance(provider, MoshiPool) and provider.capacity == 2
        a, b = provider.open(None), provider.open(None)
        outs = provider.step_many([a, b], frames(2), [3, a.tokenizer.start_id])
        assert len(outs) == 2 and all(o.audio.shape == (FRAME_SAMPLES,) for o in outs)
    finally:
        provider.close()


def test_moshi_options_reach_commands_that_build_by_name(tiny_dir, monkeypatch):
    """`tandem bench` builds front-ends by name only: its --moshi-* options travel as TANDEM_MOSHI_*."""
    import argparse

    from tandem.frontends.moshi import _cache, make_front_end
    from tandem.frontends.moshi.options import ENV, add_cli_args, env_defaults, export_env, kwargs_from_args

    p = argparse.ArgumentParser()
    add_cli_args(p)
    args = p.parse_args(["--moshi-weights", str(tiny_dir), "--moshi-device", "cpu", "--moshi-seed", "4"])
    assert kwargs_from_args(args) == {"moshi_weights": tiny_dir, "device": "cpu", "seed": 4}
    for v in ENV.values():
        monkeypatch.delenv(v, raising=False)
    export_env(args)
    try:
        assert env_defaults() == {"moshi_weights": str(tiny_dir), "device": "cpu", "seed": 4}
        _cache.clear()
        fe = make_front_end(tts=None)
        assert fe.seed == 4 and fe.bundle.device.type == "cpu"
    finally:
        for v in ENV.values():
            os.environ.pop(v, None)


def test_run_without_weights_fails_with_one_line(tmp_path, capsys, spoken_question):
    from tandem.audio.frames import write_mono
    from tandem.cli import main

    wav = tmp_path / "q.wav"
    write_mono(wav, spoken_question)
    rc = main(["run", str(wav), "--mode", "frontend", "--front-end", "moshi", "--moshi-weights", str(tmp_path / "none")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "huggingface-cli download" in err[0]


def test_pool_a_session_opened_but_not_yet_stepped_does_not_move(tiny_dir):
    """moshi's reset re-enables a slot's exec mask; the pool must still hold an idle new slot still."""
    from tandem.frontends.moshi import _cache
    from tandem.frontends.moshi.pool import MoshiPool

    _cache.clear()
    us = frames(5, seed=4)
    pool = MoshiPool(2, moshi_weights=tiny_dir, device="cpu", use_sampling=False)
    try:
        a = pool.open(None)
        ref = [a.step(u, 3) for u in us]  # what a fresh session says to `us`
        a.close()
        a = pool.open(None)
        b = pool.open(None)  # b opens, then waits three ticks while a talks
        for u in frames(3, seed=8):
            pool.step_many([a], [u], [3])
        got = [b.step(u, 3) for u in us]
        for r, g in zip(ref, got):
            np.testing.assert_allclose(g.audio, r.audio, atol=1e-5)
            assert g.text == r.text
    finally:
        pool.close()


def test_an_oracle_changes_the_output_from_its_frame_on_never_before(bundle):
    """Greedy decoding, same audio: an oracle fed at frame 5 leaves frames 0-4 untouched and changes
    what follows (the acoustic codebooks of the frame returned at step 5 are sampled at step 5)."""
    greedy = Sampling(use_sampling=False)
    us = frames(12, seed=6)
    runs = []
    for oracle in (None, [40, 41, 42, 43]):
        s = OracleStream(bundle.tokenizer.start_id, bundle.tokenizer.pad_id, KamePolicy())
        with MoshiFrontEnd(bundle, sampling=greedy) as fe:
            fe.reset()
            outs = []
            for k, u in enumerate(us):
                if oracle and k == 5:
                    s.reset(k)
                    s.append(oracle, k)
                outs.append(fe.step(u, s.token(k)))
        runs.append(outs)
    plain, fed = runs
    for k in range(5):
        assert np.array_equal(plain[k].audio, fed[k].audio) and plain[k].text == fed[k].text, k
    assert any(not np.allclose(p.audio, f.audio) for p, f in zip(plain[5:], fed[5:]))
