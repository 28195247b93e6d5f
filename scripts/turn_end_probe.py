"""How well does the embedded LLM's turn-end chance (tandem/llm/turn_end.py) tell whole messages from words
that go on? Its chance on texts as Whisper writes them at a pause: whole questions (the dev questions), the dev
dialogues' turns, the full-duplex dev set's turns and interruptions; the first halves of its pause items with
the full stop or question mark Whisper puts on them; its stories' sentences; a few everyday turns. Counts under
each threshold, and the prompt evaluation time.

    python scripts/turn_end_probe.py [--out docs/turn-end-probe.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from tandem.llm.local_server import LocalLlamaServer
from tandem.llm.turn_end import TurnEndJudge

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FDB = Path(__file__).resolve().parents[1] / "tandem" / "bench" / "fdb_dev.json"
EVERYDAY = ["Hello, how are you?", "Tell me a joke.", "I need a recipe for pancakes.", "Set a timer for ten minutes.",
            "Hi there.", "Thanks."]
THRESHOLDS = (0.01, 0.02, 0.05, 0.1, 0.2)


def sets() -> dict[str, list[str]]:
    fdb = json.loads(FDB.read_text())
    questions = [json.loads(line)["question"] for line in (DATA / "questions-dev.jsonl").open()]
    dialogue = [t["say"] for line in (DATA / "dialogues-dev.jsonl").open() for t in json.loads(line)["turns"]
                if "say" in t and len(t["say"].split()) > 1]
    whole = [t for t, _ in fdb["turn"]] + [a for a, _, _ in fdb["interruption"]] + [b for _, b, _ in fdb["interruption"]]
    fragments = [a.rstrip(",. ") + ("?" if a.split()[0].lower() in ("can", "could", "what", "how", "tell") else ".")
                 for a, _ in fdb["pause"]]
    story = [s for st in fdb["backchannel"] for s in st]
    return {"dev questions": questions, "dev dialogue turns": dialogue, "fdb dev whole turns": whole,
            "everyday turns": EVERYDAY, "pause fragments": fragments, "story sentences": story}


async def judge_all(url: str, texts: list[str]) -> tuple[list[float | None], list[float]]:
    judge = TurnEndJudge(url, timeout_s=5.0)
    out, ms = [], []
    try:
        for t in texts:
            t0 = time.perf_counter()
            out.append(await judge.p_end(t))
            ms.append((time.perf_counter() - t0) * 1e3)
    finally:
        await judge.close()
    return out, ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    report: dict = {"date": time.strftime("%Y-%m-%d"), "model": "SmolLM2-135M-Instruct Q4_1 (embedded)", "sets": {}}
    with LocalLlamaServer() as srv:
        for name, texts in sets().items():
            p, ms = asyncio.run(judge_all(srv.url, texts))
            q = [x if x is not None else 1.0 for x in p]
            report["sets"][name] = {
                "n": len(texts), "min": round(min(q), 4), "median": round(statistics.median(q), 4),
                "under": {str(th): sum(x < th for x in q) for th in THRESHOLDS},
                "ms_median": round(statistics.median(ms), 1),
                "lowest": sorted(((round(x, 4), t) for x, t in zip(q, texts)))[:5]}
            r = report["sets"][name]
            print(f"{name:22s} n={r['n']:3d} min={r['min']:.3f} median={r['median']:.3f} under={r['under']} "
                  f"{r['ms_median']:.0f} ms")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
