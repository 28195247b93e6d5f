"""Figures read off a session timeline: the measures that matter (ARCHITECTURE, 'Measures')."""
from __future__ import annotations

from collections import Counter, deque
from typing import Any

import numpy as np

from ..audio.frames import FRAME_S


def speech_end_s(tl: dict[str, Any]) -> float | None:
    """Audio time of the end of the user's last speech segment that got a final transcript."""
    ends = [e["audio_s"] for e in tl["events"] if e["kind"] == "vad_end"]
    return ends[-1] if ends else None


def onset_s(tl: dict[str, Any], after: float | None) -> float | None:
    """End of user speech -> first assistant audio above silence (from the timeline): the session's
    own measure of that turn (`turn_onset`), or, in timelines recorded before it, the first stretch of
    assistant speech that started after the end."""
    if after is None:
        return None
    recorded = [e["onset_s"] for e in tl["events"] if e["kind"] == "turn_onset" and abs(e["speech_end_s"] - after) < 2e-3]
    if recorded:
        return recorded[0]
    starts = [e["t"] for e in tl["events"] if e["kind"] == "assistant_audio_start" and e["t"] >= after]
    return round(starts[0] - after, 4) if starts else None


class TurnOnsets:
    """Onset as the user hears it: from the end of their speech to the first audible assistant frame
    after it, whether the reply started then or was already under way (it talked over the end, or
    resumed after a cut). The end is known only when the VAD's end event arrives (~0.5 s later), so
    recent audible frames are remembered until then."""

    KEEP_S = 8.0  # a VAD end event later than this would be a stalled Listener: its onset is not measured

    def __init__(self) -> None:
        self._audible: deque[float] = deque()
        self._end: float | None = None

    def speech_start(self) -> None:
        self._end = None  # the user spoke again before any reply: that end has no onset

    def speech_end(self, audio_s: float) -> tuple[float, float] | None:
        """The user's speech ended at `audio_s`: (that end, its onset) if the assistant was audible since."""
        self._end = audio_s
        after = next((t for t in self._audible if t >= audio_s), None)
        return self._take(after) if after is not None else None

    def audible(self, t: float) -> tuple[float, float] | None:
        """An audible assistant frame heard at `t`: (the pending end of speech, its onset), if any."""
        self._audible.append(t)
        while self._audible and self._audible[0] < t - self.KEEP_S:
            self._audible.popleft()
        return self._take(t) if self._end is not None and t >= self._end else None

    def _take(self, t: float) -> tuple[float, float]:
        end, self._end = self._end, None
        assert end is not None
        return end, round(t - end, 4)


def frame_health(tl: dict[str, Any]) -> dict[str, float]:
    late = np.asarray(tl["frames"]["late_ms"], dtype=float)
    step = np.asarray(tl["frames"]["step_ms"], dtype=float)
    if not len(late):
        return {}
    return {
        "frames": int(len(late)),
        "late_p50_ms": round(float(np.percentile(late, 50)), 3),
        "late_p99_ms": round(float(np.percentile(late, 99)), 3),
        "late_max_ms": round(float(late.max()), 3),
        "step_p50_ms": round(float(np.percentile(step, 50)), 3),
        "step_p99_ms": round(float(np.percentile(step, 99)), 3),
        "deadline_misses": int(np.sum(late + step > FRAME_S * 1e3)),
    }


def miss_cause(miss: dict[str, Any]) -> str:
    """What mostly made a frame late (a `deadline_miss` event): "gc", "cpu" (its own work),
    "cpu_wait" (the cores were busy elsewhere), "steal" (the hypervisor ran something else) or "blocked"
    (the GIL, a lock), in its step, or with "late:" in front, before its step began."""
    part, prefix = (miss["step"], "") if miss["step_ms"] >= miss["late_ms"] else (miss["before"], "late:")
    if part.get("gc_ms", 0) >= 0.5 * part["wall_ms"]:
        return prefix + "gc"
    shares = {k: part.get(f"{k}_ms", 0.0) for k in ("cpu", "cpu_wait", "blocked")}
    # stolen time reads as blocked; it is summed over the cores, so at most the blocked time was this thread's
    shares["steal"] = min(part.get("steal_ms", 0.0), shares["blocked"])
    shares["blocked"] -= shares["steal"]
    return prefix + max(shares, key=shares.__getitem__)


def count_causes(runs: list[dict[str, Any]]) -> str | None:
    """The runs' deadline misses by cause ("gc 1, late:blocked 2"), or None without a miss."""
    n = Counter(c for r in runs for c in r.get("miss_causes", []))
    return ", ".join(f"{c} {k}" for c, k in n.most_common()) or None


def summarize(tl: dict[str, Any]) -> dict[str, Any]:
    ev = tl["events"]
    end = speech_end_s(tl)
    finals = [e for e in ev if e["kind"] == "final"]
    partials = [e for e in ev if e["kind"] == "partial" and not e.get("reused")]  # a pause told again is no decode
    ttft = [e["ttft_s"] for e in ev if e["kind"] == "llm_first_token"]
    first_tts_start = next((e["t"] for e in ev if e["kind"] == "tts_start"), None)
    first_tts_audio = next((e for e in ev if e["kind"] == "tts_audio"), None)
    vad_end_ev = next((e for e in reversed(ev) if e["kind"] == "vad_end"), None)
    out: dict[str, Any] = {
        "speech_end_s": end,
        "vad_end_delay_s": round(vad_end_ev["t"] - vad_end_ev["audio_s"], 4) if vad_end_ev else None,
        "final_latency_s": round(finals[-1]["t"] - end, 4) if finals and end is not None else None,
        "final_text": finals[-1]["text"] if finals else None,
        "partial_stale_median_s": round(float(np.median([p["stale_s"] for p in partials])), 4) if partials else None,
        "partials": len(partials),
        "llm_ttft_s": ttft[0] if ttft else None,
        "tts_first_audio_s": round(first_tts_audio["t"] - first_tts_start, 4) if first_tts_audio and first_tts_start is not None else None,
        "onset_s": onset_s(tl, end),
        "said": " ".join(e["text"] for e in ev if e["kind"] == "assistant_text"),
        "error_messages": [e.get("error") if e["kind"] != "fault" else f"{e.get('action')}: {e.get('error')}"
                           for e in ev if e["kind"] in ("error", "llm_error", "fault")],
        "faults": sum(1 for e in ev if e["kind"] == "fault" and e.get("action") != "restarted"),
    }
    out.update(frame_health(tl))
    causes = [miss_cause(e) for e in ev if e["kind"] == "deadline_miss"]
    if causes:
        out["miss_causes"] = causes
    meta = tl.get("meta", {})
    out.update(meta.get("llm_stats", {}))
    if "oracle_tokens_fed" in meta:
        out["oracle_tokens_fed"] = meta["oracle_tokens_fed"]
        out["oracle_resets"] = sum(1 for e in ev if e["kind"] == "oracle_reset")
        for k, v in meta.get("oracle_policy_stats", {}).items():
            out[f"oracle_{k}"] = v
    return out
