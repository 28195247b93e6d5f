"""How much longer a reply takes when the voice gets it a few words at a time, as a front-end hands it
over while it speaks, than when it gets the reply whole, as the cascade does.

    python scripts/phrase_pace.py [--sentences FILE] [--out docs/phrase-pace.json]

For each segment size (1, 2, 3 words) it voices every sentence in segments of that size, trimmed as
the Voicer trims them, and reports the total duration as a ratio of the sentences voiced whole: at
hibari's own pace (speed 1.0) and with tandem/speak/tts.py's `segment_speed`.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tqdm import tqdm

from tandem.audio.frames import SAMPLE_RATE
from tandem.speak.tts import HibariTTS, segment_speed, trim_segment

SENTENCES = [
    "The longest river in Africa is the Nile.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The Great Wall of China was built over many centuries.",
    "Jupiter is the largest planet in our solar system.",
    "The Mona Lisa was painted by Leonardo da Vinci.",
    "A spider has eight legs.",
    "The chemical symbol for gold is Au.",
    "Mount Kilimanjaro is in Tanzania.",
    "The human heart has four chambers.",
    "Light from the Sun reaches Earth in about eight minutes.",
    "The official language of Brazil is Portuguese.",
    "Penguins live mostly in the Southern Hemisphere.",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sentences", type=Path, help="one sentence per line (default: a built-in dozen)")
    ap.add_argument("--out", type=Path, default=Path("docs/phrase-pace.json"))
    args = ap.parse_args()
    sentences = [s.strip() for s in args.sentences.read_text().splitlines() if s.strip()] if args.sentences \
        else SENTENCES
    tts = HibariTTS()

    def seconds(text: str, speed: float) -> float:
        return len(trim_segment(tts._tts(text, speed=speed, seed=0), text)) / SAMPLE_RATE

    whole = sum(seconds(s, 1.0) for s in sentences)
    rows = []
    for size in tqdm((1, 2, 3), desc="segment sizes"):
        row: dict = {"words_per_segment": size}
        segments = [" ".join(w[i:i + size]) for w in (s.split() for s in sentences) for i in range(0, len(w), size)]
        for label, speed_of in (("speed_1", lambda _: 1.0), ("shipped", segment_speed)):
            total = sum(seconds(seg, speed_of(seg)) for seg in segments)
            row[label] = {"seconds": round(total, 2), "ratio_to_whole": round(total / whole, 3)}
        rows.append(row)
    result = {"sentences": len(sentences), "whole_s": round(whole, 2), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(sentences)} sentences, voiced whole: {whole:.2f} s")
    print("| words per segment | at speed 1.0 | with the shipped speed |")
    print("|---|---|---|")
    for r in rows:
        a, b = r["speed_1"], r["shipped"]
        print(f"| {r['words_per_segment']} | {a['ratio_to_whole']:.2f}x | {b['ratio_to_whole']:.2f}x |")


if __name__ == "__main__":
    main()
