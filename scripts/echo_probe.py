"""When Whisper, told the user's earlier turns, hears one of them again: a question asked again, or
the context invented over noise? Offline, no session. Each question is spoken in the test voices and
decoded told a context that holds it (the user asks it again); hiss, silence and clicks are decoded told
the same contexts. Reported: how often each comes out as an echo of its context, Whisper's no-speech
probability for those echoes, and what a second decode without the context hears for a repeat (the
rule before `ECHO_NO_SPEECH` decoded every echo again).

    python scripts/echo_probe.py --questions ../shared/data/questions-dev.jsonl --limit 24 \
        --voices festival,flite,espeak --out docs/echo-probe.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tandem.audio.frames import resample
from tandem.listener.whisper import ShortContextWhisper
from tandem.listener.worker import ECHO_NO_SPEECH, echoes
from tandem.bench.scoring import normalize
from tandem.audio.voices import speak


def noises(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(8000)
    return {
        "hiss 1 s": (0.05 * rng.standard_normal(16000)).astype(np.float32),
        "quiet hiss 1.5 s": (0.02 * rng.standard_normal(24000)).astype(np.float32),
        "silence 1 s": np.zeros(16000, np.float32),
        "click 0.5 s": (0.3 * np.sin(t / 3) * np.exp(-t / 2000)).astype(np.float32),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=24)
    ap.add_argument("--voices", default="festival,flite,espeak")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    qs = [json.loads(line)["question"] for line in args.questions.read_text().splitlines() if line.strip()][: args.limit]
    w = ShortContextWhisper()
    repeats, noise_echoes, noise_total = [], [], 0
    for voice in args.voices.split(","):
        for i, q in enumerate(tqdm(qs, desc=voice)):
            context = f"{qs[i - 1]} {q}"  # the question was the user's last turn, after another
            audio = resample(speak(q, voice, lead_s=0.3, tail_s=0.2), 24000, 16000)
            told = w.transcribe(audio, context=context)
            row = {"voice": voice, "question": q, "told": told.text, "no_speech_prob": round(told.no_speech_prob, 3),
                   "echo": echoes(told.text, context)}
            if row["echo"]:
                row["again_without"] = w.transcribe(audio).text
            repeats.append(row)
    for q in qs[:8]:
        for name, audio in noises().items():
            noise_total += 1
            told = w.transcribe(audio, context=q)
            if echoes(told.text, q):
                noise_echoes.append({"noise": name, "context": q, "no_speech_prob": round(told.no_speech_prob, 3)})
    echoed = [r for r in repeats if r["echo"]]
    summary = {
        "echo_no_speech": ECHO_NO_SPEECH,
        "repeats": len(repeats),
        "repeats_heard_as_echo": len(echoed),
        "repeat_echo_no_speech_max": max((r["no_speech_prob"] for r in echoed), default=None),
        "repeats_decoded_again_by_the_rule": sum(r["no_speech_prob"] >= ECHO_NO_SPEECH for r in echoed),
        "repeats_heard_otherwise_without_context": sum(normalize(r["again_without"]) != normalize(r["told"]) for r in echoed),
        "noise_clips": noise_total,
        "noise_heard_as_echo": len(noise_echoes),
        "noise_echo_no_speech_min": min((r["no_speech_prob"] for r in noise_echoes), default=None),
        "noise_echoes_kept_by_the_rule": sum(r["no_speech_prob"] < ECHO_NO_SPEECH for r in noise_echoes),
    }
    print(json.dumps(summary, indent=1))
    for r in echoed:
        if normalize(r["again_without"]) != normalize(r["told"]):
            print(f"  {r['voice']}: told {r['told']!r}, without the context {r['again_without']!r}")
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "repeats": repeats, "noise_echoes": noise_echoes}, indent=1))


if __name__ == "__main__":
    main()
