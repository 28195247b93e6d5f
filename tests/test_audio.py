import numpy as np
import pytest
import soundfile as sf

from tandem.audio.frames import FRAME_SAMPLES, SAMPLE_RATE, frames_of, load_input, write_stereo
from tandem.runtime.errors import InputAudioError


def tone(rate: int, secs: float = 1.0, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * secs)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000, 44100, 48000])
@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24", "PCM_32", "FLOAT"])
def test_any_common_wav_becomes_24k_mono(tmp_path, rate, subtype):
    p = tmp_path / "in.wav"
    sf.write(p, tone(rate), rate, subtype=subtype)
    a = load_input(p)
    assert a.samples.dtype == np.float32
    assert abs(len(a.samples) - SAMPLE_RATE) <= 2
    assert 0.45 < np.max(np.abs(a.samples)) < 0.55
    assert a.source_rate == rate


def test_stereo_is_mixed_to_mono(tmp_path):
    p = tmp_path / "st.wav"
    x = tone(24000)
    sf.write(p, np.stack([x, np.zeros_like(x)], axis=1), 24000)
    a = load_input(p)
    assert a.source_channels == 2
    assert 0.2 < np.max(np.abs(a.samples)) < 0.3


@pytest.mark.parametrize("make, msg", [
    (lambda p: None, "not found"),
    (lambda p: p.write_bytes(b""), "cannot read"),
    (lambda p: p.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunkjunkjunk" * 4), "cannot read"),
    (lambda p: p.write_text("hello, I am not audio"), "cannot read"),
    (lambda p: sf.write(p, np.zeros(24000, np.float32), 24000), "silent"),
    (lambda p: sf.write(p, np.zeros((100, 3), np.float32) + 0.5, 24000), "3 channels"),
    (lambda p: sf.write(p, np.zeros(0, np.float32), 24000), "no audio"),
    (lambda p: sf.write(p, tone(4000, 1.0), 4000), "sample rate of 4000"),
])
def test_bad_input_is_one_clear_error(tmp_path, make, msg):
    p = tmp_path / "bad.wav"
    make(p)
    with pytest.raises(InputAudioError, match=msg):
        load_input(p)


def test_too_long_input_is_refused_before_decoding(tmp_path):
    p = tmp_path / "long.wav"
    sf.write(p, np.full(8000 * 11, 0.1, np.float32), 8000)
    with pytest.raises(InputAudioError, match="limit is 10 s"):
        load_input(p, max_s=10)


def test_truncated_wav_data_is_reported(tmp_path):
    p = tmp_path / "t.wav"
    sf.write(p, tone(24000, 2.0), 24000, subtype="PCM_16")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    try:
        a = load_input(p)  # libsndfile may read what is there: then it must be shorter, not garbage
        assert len(a.samples) < 2 * SAMPLE_RATE
    except InputAudioError as e:
        assert "t.wav" in str(e)


def test_nan_samples_rejected(tmp_path):
    p = tmp_path / "nan.wav"
    x = tone(24000)
    x[100] = np.nan
    sf.write(p, x, 24000, subtype="FLOAT")
    with pytest.raises(InputAudioError, match="NaN"):
        load_input(p)


def test_frames_pad_the_last_frame():
    f = frames_of(np.ones(FRAME_SAMPLES * 2 + 5, np.float32))
    assert f.shape == (3, FRAME_SAMPLES)
    assert f[2, :5].sum() == 5 and f[2, 5:].sum() == 0


def test_write_stereo_is_as_long_as_input_with_user_left(tmp_path):
    p = tmp_path / "o.wav"
    user = tone(24000, 1.0)
    write_stereo(p, user, np.ones(48000, np.float32) * 0.25, len(user))
    data, rate = sf.read(p)
    assert rate == 24000 and data.shape == (24000, 2)
    assert np.allclose(data[:, 0], user, atol=1e-4)
    assert np.allclose(data[:, 1], 0.25, atol=1e-4)
