"""Two `tandem bench` runs of the same questions or dialogues side by side, per mode: right answers, onset,
answer latency, and every item whose outcome or words differ. For a change that should not change
behaviour (a renovation), this is the evidence: the differences listed, each to be explained.

    python scripts/compare_benches.py BEFORE/results.json AFTER/results.json [--out diff.md]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _key(run: dict) -> tuple[str, str]:
    return run.get("question_id") or run.get("dialogue_id") or run.get("id", "?"), run.get("variant", run["mode"])


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def _right(run: dict) -> bool | None:
    for k in ("correct", "answered"):
        if k in run:
            return run[k]
    return None


def compare(before: dict, after: dict) -> list[str]:
    b = {_key(r): r for r in before["runs"]}
    a = {_key(r): r for r in after["runs"]}
    lines = ["| mode | items | right, before / after | onset median, before / after | answer median, before / after |",
             "|---|---|---|---|---|"]
    for mode in sorted({m for _, m in b} & {m for _, m in a}):
        keys = sorted(k for k in b if k[1] == mode and k in a)
        rb = sum(bool(_right(b[k])) for k in keys)
        ra = sum(bool(_right(a[k])) for k in keys)
        ob, oa = _median([b[k].get("onset_s") for k in keys]), _median([a[k].get("onset_s") for k in keys])
        ab, aa = _median([b[k].get("answer_s") for k in keys]), _median([a[k].get("answer_s") for k in keys])
        lines.append(f"| {mode} | {len(keys)} | {rb} / {ra} | {ob} / {oa} s | {ab} / {aa} s |")
    lines += ["", "Items whose outcome or words differ:", ""]
    same = 0
    for k in sorted(set(b) & set(a)):
        x, y = b[k], a[k]
        said_x, said_y = x.get("said_text", x.get("said", "")), y.get("said_text", y.get("said", ""))
        if _right(x) == _right(y) and said_x == said_y:
            same += 1
            continue
        lines.append(f"- {k[0]} ({k[1]}): right {_right(x)} -> {_right(y)}; said {said_x!r} -> {said_y!r}; "
                     f"onset {x.get('onset_s')} -> {y.get('onset_s')} s")
    lines.append(f"\n{same} of {len(set(b) & set(a))} items said the same words with the same outcome.")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = "\n".join(compare(json.loads(args.before.read_text()), json.loads(args.after.read_text())))
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
