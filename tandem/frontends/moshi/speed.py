"""Real-time factor and onset latency of the moshi front-end (used by scripts/gpu_bench.py).

Speed depends on the shapes, not the weights, so `random_bundle` builds the 7B LM and the full Mimi
with random weights: step times on a GPU can be measured without downloading anything. Onset
latency needs the real weights (a random model does not take turns).

Clocks: step k hears user frame k and returns the assistant's frame k - 1; as in the Session, that
output is played in output frame k + 1. Figures are on that frame clock; the step's own compute
time must fit inside the 80 ms frame for real time (RTF < 1), and adds to latency once.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...audio.frames import FRAME_S, FRAME_SAMPLES
from ...speak.frontend import UserFrame
from .bundle import MoshiBundle
from .checkpoint import CheckpointFiles, parse_dtype
from .frontend import MoshiFrontEnd, Sampling


def random_bundle(device: str = "cuda", dtype: str | None = None, lm_kwargs: dict[str, Any] | None = None,
                  mimi_config: dict[str, Any] | None = None, seed: int = 0) -> MoshiBundle:
    """Moshi 7B shapes (moshi's own config) with random weights; a small stand-in tokenizer."""
    from moshi.models.loaders import _lm_kwargs as moshi_7b_kwargs
    from moshi.models.loaders import get_mimi

    from .model import build_lm
    from .tiny import init_random_codebooks, train_tiny_sentencepiece
    from .tokenizer import MoshiTokenizer

    torch.manual_seed(seed)
    dev = torch.device(device)
    dt = parse_dtype(dtype, dev)
    kw = dict(lm_kwargs or moshi_7b_kwargs)
    lm = build_lm(kw, device=dev, dtype=dt).eval()
    mimi = init_random_codebooks(get_mimi(None, mimi_config, device=dev, num_codebooks=max(lm.dep_q, lm.n_q - lm.dep_q)))
    sp = train_tiny_sentencepiece(Path(tempfile.mkdtemp(prefix="tandem-sp-")) / "tok.model")
    tok = MoshiTokenizer(sp, start_id=lm.text_initial_token_id, pad_id=lm.text_padding_token_id)
    files = CheckpointFiles(Path("random"), Path("random"), sp, kw, mimi_config, source="random weights")
    return MoshiBundle(lm, mimi, tok, files, False, dev, dt)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def measure_speed(bundle: MoshiBundle, batch: int = 1, frames: int = 250, warmup: int = 20, seed: int = 0
                  ) -> dict[str, Any]:
    """Per-frame step time (Mimi encode + LM step with oracle + Mimi decode) for `batch` sessions."""
    rng = np.random.default_rng(seed)
    users = [[UserFrame((0.05 * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32), 0.0, False)
              for _ in range(batch)] for _ in range(8)]
    dev = bundle.device
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    times: list[float] = []
    with MoshiFrontEnd(bundle, batch_size=batch, seed=seed) as fe:
        fe.reset()
        pad, start = fe.tokenizer.pad_id, fe.tokenizer.start_id
        for k in range(warmup + frames):
            tokens = [start if (k + i) % 40 == 0 else pad for i in range(batch)]  # oracle traffic on
            _sync(dev)
            t0 = time.perf_counter()
            fe.step_batch(users[k % len(users)], tokens)
            _sync(dev)
            if k >= warmup:
                times.append(time.perf_counter() - t0)
    ms = sorted(t * 1000 for t in times)
    mean = statistics.fmean(ms)
    res: dict[str, Any] = {
        "batch": batch, "frames": frames, "step_ms_mean": round(mean, 2), "step_ms_p50": round(ms[len(ms) // 2], 2),
        "step_ms_p99": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2), "step_ms_max": round(ms[-1], 2),
        "rtf": round(mean / (FRAME_S * 1000), 3), "deadline_misses": sum(1 for t in ms if t > FRAME_S * 1000),
        "realtime": ms[min(len(ms) - 1, int(len(ms) * 0.99))] < FRAME_S * 1000,
    }
    if dev.type == "cuda":
        res["gpu_peak_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
    return res


def measure_onset(bundle: MoshiBundle, user: np.ndarray, oracle_text: str | None = None, oracle_delay_s: float = 0.6,
                  tail_s: float = 4.0, seed: int = 0, threshold: float | None = None) -> dict[str, Any]:
    """Feed a spoken question (24 kHz), then silence; with `oracle_text`, feed it as one oracle
    (reset + append) `oracle_delay_s` after the end of speech, like a back-end answer arriving.
    Onset = end of user speech -> first audible assistant sample (the benchmark's definition)."""
    from ...think.oracle import KamePolicy, OracleStream
    from ...bench.scoring import AUDIBLE, onset_after, speech_end_of

    audio = np.concatenate([user.astype(np.float32), np.zeros(int(tail_s * 24000), np.float32)])
    n = -(-len(audio) // FRAME_SAMPLES)
    audio = np.pad(audio, (0, n * FRAME_SAMPLES - len(audio)))
    end = speech_end_of(user)
    if end is None:
        raise ValueError("the input has no speech")
    oracle_frame = int((end + oracle_delay_s) / FRAME_S)
    assistant = np.zeros(len(audio) + FRAME_SAMPLES, np.float32)
    times = []
    with MoshiFrontEnd(bundle, seed=seed, sampling=Sampling()) as fe:
        fe.reset()
        stream = OracleStream(fe.tokenizer.start_id, fe.tokenizer.pad_id, KamePolicy())
        for k in range(n):
            if oracle_text and k == oracle_frame:
                stream.reset(k)
                stream.append(fe.tokenizer.encode(oracle_text), k)
            frame = UserFrame(audio[k * FRAME_SAMPLES:(k + 1) * FRAME_SAMPLES], 0.0, False)
            t0 = time.perf_counter()
            out = fe.step(frame, stream.token(k))
            _sync(bundle.device)
            times.append(time.perf_counter() - t0)
            assistant[(k + 1) * FRAME_SAMPLES:(k + 2) * FRAME_SAMPLES] = out.audio  # played in the next frame
        said = fe.said()
    onset = onset_after(assistant, end, threshold if threshold is not None else AUDIBLE)
    step = statistics.fmean(times[5:]) if len(times) > 5 else statistics.fmean(times)
    return {"speech_end_s": round(end, 3), "onset_s": None if onset is None else round(onset, 3),
            "onset_plus_compute_s": None if onset is None else round(onset + step, 3),
            "speaking_at_end_of_speech": bool(np.any(np.abs(assistant[int(end * 24000) - 1920:int(end * 24000)])
                                                     > (threshold or AUDIBLE))),
            "oracle": oracle_text, "oracle_at_s": round(oracle_frame * FRAME_S, 3) if oracle_text else None,
            "said": said, "step_ms_mean": round(step * 1000, 2), "assistant": assistant}
