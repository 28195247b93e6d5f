"""Audio at the edges: read any common wav, check it, resample to the 24 kHz mono frame clock."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from ..runtime.errors import InputAudioError

SAMPLE_RATE = 24_000
FRAME_SAMPLES = 1920  # 80 ms, Mimi's 12.5 Hz clock
FRAME_S = FRAME_SAMPLES / SAMPLE_RATE
STT_SAMPLE_RATE = 16_000

MAX_INPUT_S = 600.0  # a file run is a conversation, not an audiobook
AUDIBLE = 0.01  # peak above which output audio counts as assistant speech (-40 dBFS)
SILENCE_PEAK = 1e-3  # about -60 dBFS: below this everywhere, there is nothing to hear


@dataclass(frozen=True)
class InputAudio:
    samples: np.ndarray  # float32 mono at SAMPLE_RATE
    source_rate: int
    source_channels: int

    @property
    def duration_s(self) -> float:
        return len(self.samples) / SAMPLE_RATE


def resample(x: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    if src_rate == dst_rate:
        return np.ascontiguousarray(x, dtype=np.float32)
    return soxr.resample(np.asarray(x, dtype=np.float32), src_rate, dst_rate).astype(np.float32)


def to_mono_24k(data: np.ndarray, rate: int) -> np.ndarray:
    data = np.asarray(data, dtype=np.float32)
    if data.ndim == 2:
        data = data.mean(axis=1)
    return resample(data, rate, SAMPLE_RATE)


def load_input(path: str | Path, max_s: float = MAX_INPUT_S, allow_silent: bool = False) -> InputAudio:
    """Read a wav (or anything libsndfile reads) and return 24 kHz mono float32, or raise InputAudioError."""
    path = Path(path)
    if not path.exists():
        raise InputAudioError(f"input file not found: {path}")
    if path.is_dir():
        raise InputAudioError(f"input is a directory, not an audio file: {path}")
    try:
        info = sf.info(str(path))
    except Exception as e:  # libsndfile's messages are terse; name the file and the likely cause
        raise InputAudioError(f"cannot read {path} as audio ({_short(e)}); expected a wav file") from None
    if info.frames == 0 or info.samplerate <= 0:
        raise InputAudioError(f"input {path} holds no audio samples")
    if info.channels > 2:
        raise InputAudioError(f"input {path} has {info.channels} channels; only mono or stereo is supported")
    duration = info.frames / info.samplerate
    if duration > max_s:
        raise InputAudioError(f"input {path} is {duration:.0f} s long; the limit is {max_s:.0f} s")
    if info.samplerate < 8000:
        raise InputAudioError(f"input {path} has a sample rate of {info.samplerate} Hz; at least 8000 Hz is needed")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as e:
        raise InputAudioError(f"cannot decode {path} ({_short(e)}); the file may be truncated or corrupt") from None
    if len(data) == 0:
        raise InputAudioError(f"input {path} holds no audio samples")
    if not np.all(np.isfinite(data)):
        raise InputAudioError(f"input {path} contains NaN or infinite samples")
    mono = to_mono_24k(data, rate)
    if not allow_silent and float(np.max(np.abs(mono))) < SILENCE_PEAK:
        raise InputAudioError(f"input {path} is silent (peak below -60 dBFS); there is nothing to answer")
    return InputAudio(mono, rate, data.shape[1])


def frames_of(samples: np.ndarray) -> np.ndarray:
    """Split into [n_frames, FRAME_SAMPLES], zero-padding the last frame."""
    n = -(-len(samples) // FRAME_SAMPLES)
    out = np.zeros(n * FRAME_SAMPLES, dtype=np.float32)
    out[: len(samples)] = samples
    return out.reshape(n, FRAME_SAMPLES)


def write_stereo(path: str | Path, left: np.ndarray, right: np.ndarray, length: int) -> None:
    """User on the left, assistant on the right, both cut or padded to `length` samples."""
    out = np.zeros((length, 2), dtype=np.float32)
    out[: min(length, len(left)), 0] = left[:length]
    out[: min(length, len(right)), 1] = right[:length]
    sf.write(str(path), np.clip(out, -1.0, 1.0), SAMPLE_RATE, subtype="PCM_16")


def write_mono(path: str | Path, samples: np.ndarray, rate: int = SAMPLE_RATE) -> None:
    sf.write(str(path), np.clip(samples, -1.0, 1.0), rate, subtype="PCM_16")


def _short(e: Exception) -> str:
    return str(e).strip().splitlines()[-1][:160] if str(e).strip() else type(e).__name__
