"""What a load test found, per session and per session count: the summary, the verdict against the targets,
the capacity table and the sweep's plot (sessions against first sound and answers heard)."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ANSWER_WINDOW_S = 4.0  # an answer counts when its word is heard this soon after the end of the question
# the word the compact front-end says before it takes back what it began ("It is New sorry, It is Paris."): a
# turn whose text has it was repaired, what a listener hears as a wrong start
REPAIR_WORD = re.compile(r"\bsorry\b", re.IGNORECASE)


def repaired(turn_texts: list[str]) -> int:
    """How many of these turns' replies took back what they began."""
    return sum(1 for x in turn_texts if REPAIR_WORD.search(x))

# what users hear at capacity (ARCHITECTURE "capacity"), each session asking its own question at the same
# moment: every one must hold. The slowest first sound, not a percentile: at 6 sessions a p95 is the worst
# but one of a few dozen turns, and that one user heard it.
TARGETS = {"onset_client_median_s": 0.5, "onset_client_max_s": 0.8, "answered_pct": 100.0}



@dataclass
class SessionReport:
    index: int
    turns: int = 0
    onsets_client_s: list[float] = field(default_factory=list)
    onsets_server_s: list[float] = field(default_factory=list)
    unanswered: int = 0
    deadline_misses: int = 0
    frames: int = 0
    late_p99_ms: float = 0.0
    underruns: int = 0
    input_lag_ms: float = 0.0  # median audio waiting in the server's input buffer (from its stats)
    pages: int = 0
    errors: list[str] = field(default_factory=list)
    close_code: int | None = None
    said: str = ""
    answers_heard_s: list[float | None] = field(default_factory=list)  # per turn: answer word after the question's end
    turn_audio: list[np.ndarray] = field(default_factory=list, repr=False)  # per turn, what came back (not saved)
    turn_questions: list[int] = field(default_factory=list)  # per turn, which question was spoken
    turn_texts: list[str] = field(default_factory=list)  # per turn, the assistant's text from its question's end on



def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """Whether the run is at single-session quality, measure by measure (all must pass)."""
    checks = {
        f"client onset median <= {TARGETS['onset_client_median_s']} s":
            summary["onset_client_median_s"] is not None and summary["onset_client_median_s"] <= TARGETS["onset_client_median_s"],
        f"client onset max <= {TARGETS['onset_client_max_s']} s":
            summary["onset_client_max_s"] is not None and summary["onset_client_max_s"] <= TARGETS["onset_client_max_s"],
        f"{TARGETS['answered_pct']:g}% of turns answered within {ANSWER_WINDOW_S:g} s":
            summary["answered_pct"] is not None and summary["answered_pct"] >= TARGETS["answered_pct"],
        "0 deadline misses": summary["deadline_misses"] == 0,
        "0 input underruns": summary["underruns"] == 0,
        "0 errors": summary["errors"] == 0,
    }
    return {"pass": all(checks.values()), "checks": checks}


def _p95(xs: list[float]) -> float | None:
    return round(float(np.percentile(xs, 95)), 3) if xs else None



def summarize(reports: list[SessionReport], status: dict[str, Any] | None) -> dict[str, Any]:
    client = [x for r in reports for x in r.onsets_client_s]
    server = [x for r in reports for x in r.onsets_server_s]
    heard = [x for r in reports for x in r.answers_heard_s]
    in_time = [x for x in heard if x is not None and x <= ANSWER_WINDOW_S]
    texts = [x for r in reports for x in r.turn_texts]
    return {
        "sessions": len(reports),
        "turns": sum(r.turns for r in reports),
        "unanswered": sum(r.unanswered for r in reports),
        "answers_judged": len(heard),
        "answered_pct": round(100 * len(in_time) / len(heard), 1) if heard else None,
        "sessions_every_answer": sum(1 for r in reports if r.answers_heard_s and
                                     all(x is not None and x <= ANSWER_WINDOW_S for x in r.answers_heard_s)),
        "answer_heard_median_s": round(statistics.median(in_time), 3) if in_time else None,
        "repaired_pct": round(100 * repaired(texts) / len(texts), 1) if texts else None,
        "onset_client_median_s": round(statistics.median(client), 3) if client else None,
        "onset_client_p95_s": _p95(client),
        "onset_client_max_s": round(max(client), 3) if client else None,
        "onset_server_median_s": round(statistics.median(server), 3) if server else None,
        "deadline_misses": sum(r.deadline_misses for r in reports),
        "frames": sum(r.frames for r in reports),
        "late_p99_ms_worst": max((r.late_p99_ms for r in reports), default=0.0),
        "underruns": sum(r.underruns for r in reports),
        "input_lag_ms_max": max((r.input_lag_ms for r in reports), default=0.0),
        "errors": sum(len(r.errors) for r in reports),
        "server": status,
    }



def print_sessions(reports: list[SessionReport]) -> None:
    print(f"{'session':>7} {'turns':>5} {'onset med (client)':>18} {'onset med (server)':>18} {'answered':>8} "
          f"{'repaired':>8} {'misses':>6} {'late p99':>8} {'underruns':>9} {'input lag':>9} {'errors':>6}")
    for r in reports:
        oc = f"{statistics.median(r.onsets_client_s):.2f} s" if r.onsets_client_s else "-"
        os_ = f"{statistics.median(r.onsets_server_s):.2f} s" if r.onsets_server_s else "-"
        ans = f"{sum(1 for x in r.answers_heard_s if x is not None and x <= ANSWER_WINDOW_S)}/{len(r.answers_heard_s)}"
        fixed = f"{repaired(r.turn_texts)}/{len(r.turn_texts)}"
        print(f"{r.index:>7} {r.turns:>5} {oc:>18} {os_:>18} {ans:>8} {fixed:>8} {r.deadline_misses:>6} {r.late_p99_ms:>6.1f}ms "
              f"{r.underruns:>9} {r.input_lag_ms:>7.0f}ms {len(r.errors):>6}")


def capacity_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| sessions | client onset median | p95 | max | answered in 4 s | turns repaired | deadline misses | underruns | "
             "errors | CPU (cores, ours / others) | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        failed = [k for k, ok in s["verdict"]["checks"].items() if not ok]
        lines.append(f"| {s['sessions']} | {s['onset_client_median_s']} s | {s['onset_client_p95_s']} s | {s['onset_client_max_s']} s | "
                     f"{s['answered_pct']}% | {s.get('repaired_pct')}% | {s['deadline_misses']} | {s['underruns']} | {s['errors']} | "
                     f"{s['cpu']['ours_cores']} / {s['cpu']['others_cores']} | "
                     f"{'pass' if s['verdict']['pass'] else 'fail: ' + '; '.join(failed)} |")
    return "\n".join(lines)


def capacity_of(rows: list[dict[str, Any]]) -> int:
    """The largest session count at which this run and every smaller one passed (0: none did)."""
    cap = 0
    for s in sorted(rows, key=lambda r: r["sessions"]):
        if not s["verdict"]["pass"]:
            break
        cap = s["sessions"]
    return cap


def plot_sweep(rows: list[dict[str, Any]], path: Path, title: str = "") -> None:
    """Sessions against what their users heard: first sound (median and slowest) and answers heard in time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["sessions"])
    n = [r["sessions"] for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label, style in (("onset_client_median_s", "first sound, median", "o-"),
                              ("onset_client_p95_s", "first sound, p95", "s--"),
                              ("onset_client_max_s", "first sound, slowest", "^-")):
        ax.plot(n, [r[key] if r[key] is not None else np.nan for r in rows], style, label=label)
    ax.axhline(TARGETS["onset_client_median_s"], color="tab:blue", lw=0.8, ls=":")
    ax.axhline(TARGETS["onset_client_max_s"], color="tab:green", lw=0.8, ls=":")
    ax.set_xlabel("simultaneous sessions")
    ax.set_ylabel("seconds after the user stopped (client clock)")
    ax.set_xticks(n)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax2.bar(n, [r["answered_pct"] or 0 for r in rows], color=["tab:green" if r["verdict"]["pass"] else "tab:red"
                                                             for r in rows])
    ax2.axhline(TARGETS["answered_pct"], color="k", lw=0.8, ls=":")
    ax2.set_ylim(0, 105)
    ax2.set_xticks(n)
    ax2.set_xlabel("simultaneous sessions (green: every target held)")
    ax2.set_ylabel(f"turns whose answer was heard within {ANSWER_WINDOW_S:g} s (%)")
    fig.suptitle(title or "tandem loadtest: each session its own question, all at the same moment")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
