"""Test voices that are not the assistant's: Debian's flite, espeak-ng and festival, for spoken questions."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from .frames import SAMPLE_RATE, resample
from ..runtime.errors import TandemError

VOICES = {  # name: (program, voice, where it comes from)
    "festival": ("text2wave", "slt", "Debian packages festival festvox-us-slt-hts"),
    "flite": ("flite", "slt", "Debian package flite"),
    "flite-awb": ("flite", "awb", "Debian package flite"),
    "flite-rms": ("flite", "rms", "Debian package flite"),
    "espeak": ("espeak-ng", "en-us", "Debian package espeak-ng"),
    "espeak-gb": ("espeak-ng", "en-gb+f3", "Debian package espeak-ng"),
}
ESPEAK_WPM = 160


def speak(text: str, voice: str = "festival", lead_s: float = 0.5, tail_s: float = 3.0,
          speed: float = 1.0) -> np.ndarray:
    """24 kHz float32 of `text` in a test voice, with silence before and after; `speed` > 1 talks faster."""
    if voice not in VOICES:
        raise TandemError(f"unknown test voice {voice!r}; choose from {', '.join(VOICES)}")
    if not 0.5 <= speed <= 2.0:
        raise TandemError(f"a test voice's speed must be within 0.5-2.0, not {speed}")
    exe, name, pkg = VOICES[voice]
    if shutil.which(exe) is None:
        raise TandemError(f"test voice {voice!r} needs {exe} ({pkg}); install it with apt-get")
    with tempfile.TemporaryDirectory() as d:
        wav = Path(d) / "q.wav"
        if exe == "text2wave":
            rate = f'(set! hts_engine_params (append hts_engine_params (list (list "-r" {speed:.3f}))))'
            cmd = [exe, "-eval", "(voice_cmu_us_slt_arctic_hts)", "-eval", rate, "-o", str(wav)]
            subprocess.run(cmd, input=text.encode(), check=True, capture_output=True, timeout=60)
        elif exe == "flite":
            subprocess.run([exe, "-voice", name, "--setf", f"duration_stretch={1 / speed:.3f}", "-t", text,
                            "-o", str(wav)], check=True, capture_output=True, timeout=60)
        else:
            subprocess.run([exe, "-v", name, "-s", str(round(ESPEAK_WPM * speed)), "-w", str(wav), text],
                           check=True, capture_output=True, timeout=60)
        data, rate = sf.read(str(wav), dtype="float32", always_2d=True)
    speech = resample(data.mean(axis=1), rate, SAMPLE_RATE)
    speech = speech / max(1e-6, float(np.max(np.abs(speech)))) * 0.8
    return np.concatenate([np.zeros(int(lead_s * SAMPLE_RATE), np.float32), speech,
                           np.zeros(int(tail_s * SAMPLE_RATE), np.float32)])
