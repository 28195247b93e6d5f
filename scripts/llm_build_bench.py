"""Two llama.cpp builds of the embedded LLM side by side: time to first token and tokens per second.

Each build is a directory that holds a `llama_cpp` package (an unpacked wheel; `installed` for the
one in this environment). Both servers run at once, each with one thread as in `tandem run`, and
the same oracle requests go to one then the other, the order swapped every request, so that a busy
machine slows both alike. Medians and the ratio are printed and written as JSON.

    python scripts/llm_build_bench.py --build baseline=installed --build dispatch=/tmp/llama-dl \
        --questions ../shared/data/questions-dev.jsonl -n 27 --out docs/llm-build-bench.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
from tqdm import tqdm

from tandem.bench import load_questions
from tandem.llm.local_server import MODEL_ALIAS, LocalLlamaServer, bundled_model_path
from tandem.llm.prompt import oracle_messages


def start(name: str, where: str) -> tuple[LocalLlamaServer, float]:
    cmd = [sys.executable, "-m", "tandem.llm.llama_main", "--model", str(bundled_model_path()), "--n_ctx", "2048",
           "--n_threads", "1", "--n_threads_batch", "1", "--model_alias", MODEL_ALIAS, "--verbose", "False"]
    saved = os.environ.get("PYTHONPATH")
    if where != "installed":
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(where).resolve()), saved) if p)
    t0 = time.perf_counter()
    try:
        srv = LocalLlamaServer(command=cmd).start()  # includes the start-up check's first completion
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return srv, time.perf_counter() - t0


def one_request(url: str, question: str, max_tokens: int) -> dict[str, float]:
    body = {"model": MODEL_ALIAS, "messages": oracle_messages([], question), "max_tokens": max_tokens,
            "temperature": 0.0, "stream": True}
    t0 = time.perf_counter()
    stamps: list[float] = []
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0].get("delta", {})
            if delta.get("content"):
                stamps.append(time.perf_counter())
    if not stamps:
        raise RuntimeError(f"no tokens for {question!r}")
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 2 else float("nan")
    return {"ttft_s": stamps[0] - t0, "tokens": len(stamps), "tokens_per_s": rate}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("-n", type=int, default=27)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the questions")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in args.build]
    questions = [q.question for q in load_questions(args.questions, args.n)]
    servers = {}
    startup = {}
    try:
        for name, where in builds:
            servers[name], startup[name] = start(name, where)
        results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in builds}
        order = [name for name, _ in builds]
        todo = [q for _ in range(args.rounds) for q in questions]
        for i, q in enumerate(tqdm(todo, desc="requests", unit="q")):
            for name in (order if i % 2 == 0 else order[::-1]):
                results[name].append(one_request(servers[name].url, q, args.max_tokens))
    finally:
        for srv in servers.values():
            srv.stop()
    summary = {}
    for name, runs in results.items():
        rates = [r["tokens_per_s"] for r in runs if r["tokens_per_s"] == r["tokens_per_s"]]
        summary[name] = {"startup_s": round(startup[name], 2),
                         "ttft_median_s": round(statistics.median(r["ttft_s"] for r in runs), 4),
                         "tokens_per_s_median": round(statistics.median(rates), 1),
                         "requests": len(runs)}
    a, b = order[0], order[-1]
    summary["ratio"] = {f"ttft_{b}/{a}": round(summary[b]["ttft_median_s"] / summary[a]["ttft_median_s"], 3),
                        f"tokens_per_s_{b}/{a}": round(summary[b]["tokens_per_s_median"] /
                                                       summary[a]["tokens_per_s_median"], 3)}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "runs": results, "builds": dict(builds),
                                        "cpu": _cpu_name()}, indent=1))
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
