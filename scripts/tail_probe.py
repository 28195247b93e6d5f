"""How much of a question's end can a partial miss and still be the question? Offline, no session.

Each question is spoken in the test voices, and the Listener's VAD finds where its voice ends. The audio
up to 0.1 s past that end is decoded as the Listener's pause partial would be (the reference). The audio
cut `tail` seconds before that end is decoded as a hop partial heard that much before the user stopped.
Reported per tail: how often the cut decode reads as a whole question (Whisper's closing punctuation, no
function word or cut-off word last: what the scheduler settles on), and how often such a whole-reading cut
says other words than the reference (a turn that would be settled on the wrong question).

    python scripts/tail_probe.py --questions ../shared/data/questions-dev.jsonl \
        --questions examples/questions-general.jsonl --voices festival,flite,espeak --out docs/tail-probe.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tandem.audio.frames import resample
from tandem.listener.vad import SAMPLE_RATE, VadSegmenter
from tandem.listener.whisper import ShortContextWhisper
from tandem.turn.scheduler import reads_whole
from tandem.bench.scoring import normalize
from tandem.audio.voices import speak

FRAME = 1280  # 80 ms at 16 kHz: the VAD is fed as the server feeds it


def voiced_end(audio: np.ndarray) -> int:
    """The sample where the VAD's last voiced window ends."""
    vad = VadSegmenter()
    for i in range(0, len(audio), FRAME):
        vad.feed(audio[i:i + FRAME])
    return vad.last_voiced_end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=Path, action="append", required=True)
    ap.add_argument("--voices", default="festival,flite,espeak")
    ap.add_argument("--tails", default="0.05,0.1,0.15,0.2,0.25,0.3")
    ap.add_argument("--limit", type=int, default=0, help="questions per file (0: all)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    qs = []
    for path in args.questions:
        lines = [json.loads(line)["question"] for line in path.read_text().splitlines() if line.strip()]
        qs += lines[: args.limit] if args.limit else lines
    tails = [float(t) for t in args.tails.split(",")]
    w = ShortContextWhisper()
    rows = []
    for voice in args.voices.split(","):
        for q in tqdm(qs, desc=voice):
            audio = resample(speak(q, voice, lead_s=0.3, tail_s=0.6), 24000, 16000)
            end = voiced_end(audio)
            ref = w.transcribe(audio[: end + int(0.1 * SAMPLE_RATE)]).text
            row = {"voice": voice, "question": q, "reference": ref, "cuts": {}}
            for tail in tails:
                text = w.transcribe(audio[: max(0, end - int(tail * SAMPLE_RATE))]).text
                row["cuts"][str(tail)] = {"text": text, "whole": reads_whole(text),
                                         "same": normalize(text) == normalize(ref)}
            rows.append(row)
    summary = {"decodes_per_tail": len(rows), "reference_whole": sum(reads_whole(r["reference"]) for r in rows), "tails": {}}
    for tail in tails:
        cuts = [r["cuts"][str(tail)] for r in rows]
        summary["tails"][str(tail)] = {
            "whole": sum(c["whole"] for c in cuts),
            "whole_and_same": sum(c["whole"] and c["same"] for c in cuts),
            "whole_but_other_words": sum(c["whole"] and not c["same"] for c in cuts),
        }
    print(json.dumps(summary, indent=1))
    for tail in tails:
        for r in rows:
            c = r["cuts"][str(tail)]
            if c["whole"] and not c["same"]:
                print(f"  tail {tail}: {r['voice']}: {c['text']!r} for {r['reference']!r}")
    if args.out:
        rows_text = ",\n".join("  " + json.dumps(r) for r in rows)  # a question a line
        args.out.write_text(f'{{"summary": {json.dumps(summary, indent=1)},\n "rows": [\n{rows_text}\n ]\n}}\n')


if __name__ == "__main__":
    main()
