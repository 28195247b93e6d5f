"""Draw a session timeline as lanes on one time axis (PNG)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..audio.frames import SAMPLE_RATE

LANES = ["user audio", "VAD", "transcript", "LLM streams", "oracle", "assistant text", "assistant audio"]


def plot_timeline(tl: dict[str, Any], path: str | Path, user: np.ndarray | None = None,
                  assistant: np.ndarray | None = None, title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = tl["events"]
    frames = tl["frames"]
    dur = max([len(user) / SAMPLE_RATE if user is not None else 0.0]
              + [e["t"] for e in events] + [frames["t"][-1] if frames["t"] else 0.0]) + 0.2
    fig, ax = plt.subplots(figsize=(max(10, dur * 1.1), 6.5))
    y = {name: len(LANES) - 1 - i for i, name in enumerate(LANES)}

    def wave(sig, lane, color):
        if sig is None or len(sig) == 0:
            return
        step = max(1, len(sig) // 4000)
        env = np.abs(sig[: len(sig) // step * step]).reshape(-1, step).max(axis=1)
        t = np.arange(len(env)) * step / SAMPLE_RATE
        env = env / max(1e-6, env.max()) * 0.4
        ax.fill_between(t, y[lane] - env, y[lane] + env, color=color, lw=0)

    wave(user, "user audio", "tab:blue")
    wave(assistant, "assistant audio", "tab:green")

    start = None
    for e in events:
        if e["kind"] == "vad_start":
            start = e.get("audio_s", e["t"])
        elif e["kind"] == "vad_end" and start is not None:
            ax.broken_barh([(start, e["audio_s"] - start)], (y["VAD"] - 0.3, 0.6), color="tab:orange")
            ax.plot([e["t"]], [y["VAD"]], "k|", ms=14)
            start = None
    if start is not None:
        ax.broken_barh([(start, dur - start)], (y["VAD"] - 0.3, 0.6), color="tab:orange")

    row = 0
    for e in events:
        if e["kind"] in ("partial", "final"):
            final = e["kind"] == "final"
            ax.plot([e["t"]], [y["transcript"]], "s" if final else ".", color="k" if final else "gray")
            ax.annotate(e.get("text", "")[:40], (e["t"], y["transcript"] + (0.15 + 0.12 * (row % 3))),
                        fontsize=6, color="k" if final else "gray", fontweight="bold" if final else "normal")
            row += 1

    streams: dict[Any, dict[str, float]] = {}
    for e in events:
        sid = e.get("stream")
        if e["kind"] == "llm_start":
            streams[sid] = {"start": e["t"]}
        elif sid in streams and e["kind"] in ("llm_first_token", "llm_done", "llm_cancel", "llm_error", "llm_adopt"):
            streams[sid].setdefault(e["kind"], e["t"])
    for i, (sid, s) in enumerate(streams.items()):
        end = s.get("llm_done", s.get("llm_cancel", s.get("llm_error", dur)))
        yy = y["LLM streams"] - 0.35 + 0.7 * ((i % 4) / 4)
        color = "tab:red" if "llm_cancel" in s or "llm_error" in s else "tab:purple"
        ax.plot([s["start"], end], [yy, yy], color=color, lw=3, solid_capstyle="butt")
        if "llm_first_token" in s:
            ax.plot([s["llm_first_token"]], [yy], "k^", ms=4)

    ft = np.asarray(frames["t"])
    tok = np.asarray(frames["oracle_token"])
    fed = [t for t, k in zip(ft, tok) if k >= 0]
    if len(fed) and "oracle_policy" in tl.get("meta", {}):
        pad = tl["meta"].get("oracle_pad")
        ticks = [t for t, k in zip(ft, tok) if k >= 0 and k != pad]
        ax.plot(ticks, [y["oracle"]] * len(ticks), "|", color="tab:brown", ms=10)
    for e in events:
        if e["kind"] == "oracle_reset":
            ax.plot([e["t"]], [y["oracle"]], "o", color="tab:brown", mfc="none")

    row = 0
    for e in events:
        if e["kind"] == "assistant_text":
            ax.annotate(e["text"][:50], (e["t"], y["assistant text"] - 0.3 + 0.2 * (row % 3)), fontsize=6, color="tab:green")
            ax.plot([e["t"]], [y["assistant text"]], "g>", ms=5)
            row += 1
        elif e["kind"] in ("error", "llm_error"):
            ax.plot([e["t"]], [y["LLM streams"] if e["kind"] == "llm_error" else y["transcript"]], "rx", ms=9)
        elif e["kind"] in ("voice_pause", "backchannel", "barge_in"):  # talked over: paused, resumed, dropped
            style = {"voice_pause": ("|", "tab:orange", "pause"), "backchannel": (">", "tab:blue", "resume"),
                     "barge_in": ("X", "tab:red", "yield")}[e["kind"]]
            ax.plot([e["t"]], [y["assistant audio"] + 0.35], style[0], color=style[1], ms=7)
            ax.annotate(f"{style[2]} ({e.get('reason', '')})", (e["t"], y["assistant audio"] + 0.42), fontsize=6,
                        color=style[1])
        elif e["kind"] == "restate":
            ax.annotate(f"opening: {e.get('text', '')[:40]}", (e["t"], y["oracle"] + 0.3), fontsize=6, color="tab:brown")
        elif e["kind"] == "retrieval":  # a search of the user's documents, in the oracle lane
            best = (e.get("passages") or [{}])[0].get("title", "no passage" if "error" not in e else "failed")
            ax.plot([e["t"]], [y["oracle"] - 0.3], "D", color="tab:cyan", ms=4)
            ax.annotate(f"search {e.get('ms', 0):.0f} ms: {best.split(': ')[-1][:28]}", (e["t"], y["oracle"] - 0.45),
                        fontsize=5, color="tab:cyan")
        elif e["kind"] == "extractive":
            ax.annotate(f"from the documents: {e.get('text', '')[:40]}", (e["t"], y["oracle"] + 0.18), fontsize=6,
                        color="tab:cyan")
        elif e["kind"] == "fault":  # a back-end process died or came back: across every lane
            ax.axvline(e["t"], color="tab:red" if e.get("action") != "restarted" else "tab:olive", ls=":", lw=1)
            ax.annotate(f"{e.get('part')} {e.get('action')}", (e["t"], len(LANES) - 0.6), fontsize=6, color="tab:red")

    ax.set_yticks([y[n] for n in LANES], LANES)
    ax.set_ylim(-0.7, len(LANES) - 0.3)
    ax.set_xlim(0, dur)
    ax.set_xlabel("session time (s)")
    ax.grid(axis="x", alpha=0.3)
    meta = tl.get("meta", {})
    ax.set_title(title or f"mode={meta.get('mode')}  pace={meta.get('pace')}  {meta.get('input', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
