"""Does Whisper hear a turn better when it is told the turns before it? Offline, no session: each
dialogue's turns are spoken in test voices, the earlier turns transcribed as the Listener would, and
each later turn transcribed twice, without and with the earlier transcripts as Whisper's
previous-text prompt. Reported per voice: word error rate of the later turns, and how many come out
exactly right. Silence and noise are transcribed with a context too, to show it invents nothing there.

    python scripts/asr_context_probe.py --dialogues ../shared/data/dialogues-dev.jsonl \
        --dialogues examples/dialogues-followup.jsonl --voices festival,flite,espeak --out docs/asr-context-probe.json
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tandem.audio.frames import resample
from tandem.bench.dialogues import load_dialogues
from tandem.listener.whisper import ShortContextWhisper
from tandem.listener.worker import transcribe_in_context
from tandem.bench.scoring import normalize
from tandem.audio.voices import speak


def word_errors(ref: str, hyp: str) -> tuple[int, int]:
    """(edits, words of the reference): word-level Levenshtein distance."""
    r, h = normalize(ref).split(), normalize(hyp).split()
    row = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        prev, row[0] = row[0], i
        for j, hw in enumerate(h, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (rw != hw))
    return row[len(h)], len(r)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dialogues", type=Path, action="append", required=True)
    ap.add_argument("--voices", default="festival,flite,espeak")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    stt = ShortContextWhisper(threads=2)
    dialogues = [d for path in args.dialogues for d in load_dialogues(path)]
    rows = []
    for voice in args.voices.split(","):
        for d in tqdm(dialogues, desc=voice):
            heard: list[str] = []
            for k, turn in enumerate(d.turns):
                audio = resample(speak(turn.say, voice, lead_s=0.3, tail_s=0.3), 24_000, 16_000)
                plain = stt.transcribe(audio).text
                if k:
                    ctx = transcribe_in_context(stt, [(audio, " ".join(heard))])[0].text
                    e0, n = word_errors(turn.say, plain)
                    e1, _ = word_errors(turn.say, ctx)
                    rows.append({"voice": voice, "id": d.id, "said": turn.say, "context": " ".join(heard),
                                 "plain": plain, "with_context": ctx, "errors_plain": e0, "errors_context": e1,
                                 "words": n})
                heard.append(plain if not k else ctx)
    rng = np.random.default_rng(0)
    blanks = {"silence": np.zeros(32_000, np.float32),
              "noise": (0.02 * rng.standard_normal(32_000)).astype(np.float32)}
    invented = {name: {"told": stt.transcribe(a, context="What is the capital of Canada?").text,
                       "guarded": transcribe_in_context(stt, [(a, "What is the capital of Canada?")])[0].text}
                for name, a in blanks.items()}
    summary = {}
    for voice in args.voices.split(",") + ["all"]:
        rs = [r for r in rows if voice in ("all", r["voice"])]
        words = sum(r["words"] for r in rs)
        summary[voice] = {
            "turns": len(rs),
            "wer_plain": round(sum(r["errors_plain"] for r in rs) / words, 3),
            "wer_context": round(sum(r["errors_context"] for r in rs) / words, 3),
            "exact_plain": sum(r["errors_plain"] == 0 for r in rs),
            "exact_context": sum(r["errors_context"] == 0 for r in rs),
            "better": sum(r["errors_context"] < r["errors_plain"] for r in rs),
            "worse": sum(r["errors_context"] > r["errors_plain"] for r in rs),
        }
    print(json.dumps(summary, indent=1))
    print("silence/noise with a context:", invented)
    for r in rows:
        if r["errors_context"] != r["errors_plain"]:
            print(f'{r["voice"]:8} {r["id"]:8} {r["errors_plain"]}->{r["errors_context"]}  {r["plain"]!r} -> {r["with_context"]!r}')
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "blanks": invented, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
