"""A finished `tandem bench --questions` run scored again with the current scorer, from its saved audio:
correct counts and the answer latency on the questions every mode answered, per variant.

    python scripts/rescore_bench.py out/bench-fvad [out/bench-fvad-general ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import soundfile as sf

from tandem.bench.common import Question
from tandem.bench.questions import score_run
from tandem.bench.scoring import Transcriber


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="bench output folders (with results.json)")
    args = ap.parse_args()
    transcriber = Transcriber()
    for folder in args.runs:
        res = json.loads((folder / "results.json").read_text())
        rescored = []
        for r in res["runs"]:
            if r.get("failed"):
                continue
            audio, _ = sf.read(r["output_wav"], dtype="float32")
            tl = json.loads(Path(r["timeline"]).read_text())
            new = score_run(tl, audio[:, 0], audio[:, 1], Question(r["question_id"], r["question"], r["answers"]), transcriber)
            rescored.append({**r, "correct": new["correct"], "answer_s": new["answer_s"], "said": new["said"],
                             "was_correct": r["correct"]})
        variants = list(dict.fromkeys(r["variant"] for r in rescored))
        right = {v: {r["question_id"]: r["answer_s"] for r in rescored if r["variant"] == v and r["correct"]} for v in variants}
        both = set.intersection(*(set(x) for x in right.values())) if right else set()
        print(f"== {folder} (answer latency on the {len(both)} questions every variant answered)")
        for v in variants:
            mine = [r for r in rescored if r["variant"] == v]
            med = statistics.median(right[v][q] for q in both) if both else None
            print(json.dumps({"variant": v, "correct": f"{sum(r['correct'] for r in mine)}/{len(mine)}",
                              "correct_before": f"{sum(r['was_correct'] for r in mine)}/{len(mine)}",
                              "answer_s_median_common": None if med is None else round(med, 3)}))
        for r in rescored:
            if r["correct"] != r["was_correct"]:
                print(f"   {r['question_id']} {r['variant']}: {r['was_correct']} -> {r['correct']}: {r['said']!r}")
        (folder / "rescored.json").write_text(json.dumps(rescored, indent=1) + "\n")


if __name__ == "__main__":
    main()
