"""A record of everything that happened in a session, stamped with frame index and session time.

Schema (docs/TIMELINE.md): {"version", "meta", "events": [{"t", "frame", "kind", ...}],
"frames": {"t": [...], "late_ms": [...], "step_ms": [...], "oracle_token": [...], "text": [...]}}.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

SCHEMA_VERSION = 1

# Event kinds, one place so the plot, the docs and the benchmark agree on names.
VAD_START = "vad_start"
VAD_END = "vad_end"
PARTIAL = "partial"
FINAL = "final"
LLM_START = "llm_start"
LLM_FIRST_TOKEN = "llm_first_token"
LLM_CHUNK = "llm_chunk"
LLM_CANCEL = "llm_cancel"
LLM_ADOPT = "llm_adopt"
LLM_DONE = "llm_done"
LLM_ERROR = "llm_error"
RESTATE = "restate"  # a stream opened with the answer's opening restated from the question
LLM_KEEP = "llm_keep"  # the final transcript kept the stream started from the same words
ORACLE_RESET = "oracle_reset"
ORACLE_APPEND = "oracle_append"
ORACLE_END = "oracle_end"  # the adopted LLM stream ended: its oracle is complete
# the oracle stream now answers the turn's final transcript (settled=True), or a stream on a partial took over
ORACLE_SETTLED = "oracle_settled"
TTS_START = "tts_start"
TTS_AUDIO = "tts_audio"
ASSISTANT_TEXT = "assistant_text"
ASSISTANT_AUDIO_START = "assistant_audio_start"
ASSISTANT_AUDIO_END = "assistant_audio_end"  # the assistant fell silent (0.5 s without audio); t: its first silent frame
ANSWER_DUE = "answer_due"  # after an interruption, its answer is due (fed, or the user quiet): the floor is the assistant's
UNFINISHED = "unfinished"  # the user's words so far stop inside a clause: the floor stays theirs (turn/unfinished.py)
HOLD_EXPIRED = "hold_expired"  # the user stayed quiet inside their unfinished clause for the hold's limit
TURN_END_JUDGED = "turn_end_judged"  # the embedded LLM's chance that the user's message ends after `text` (llm/turn_end.py)
MAY_GO_ON = "may_go_on"  # whole words, but the judge reads the message as going on: a listener's pause
END_LIKELY = "end_likely"  # in that pause, the judge reads the final's words as the message's end
TURN = "turn"  # the turn machine moved (turn/machine.py): event, from, to, actions
TURN_ONSET = "turn_onset"  # the first audible assistant frame after a user's speech ended: speech_end_s, onset_s
ASSISTANT_CUT = "assistant_cut"  # a voiced piece cut part-way (barge-in): what was heard, what was not
BARGE_IN = "barge_in"  # the cascade stopped its reply because the user talked over it
VOICE_PAUSE = "voice_pause"  # the user talks over the voice: paused while backchannel or interruption is decided
BACKCHANNEL = "backchannel"  # the voice resumed: the burst over it was a backchannel (or had no words: a cough)
BACKCHANNEL_FINAL = "backchannel_final"  # the reply went on: a final of backchannel words is no new question
RETRIEVAL = "retrieval"  # a search of the user's documents: query, trigger (partial/final/answer), ms, passages
KNOWLEDGE_CONTEXT = "knowledge_context"  # the passages an answer request was given
EXTRACTIVE = "extractive"  # a document's sentence given as the answer outright (no LLM)
DEADLINE_MISS = "deadline_miss"  # a frame finished after its deadline: where its time went (realtime.FrameWatch)
ERROR = "error"
FAULT = "fault"  # a back-end process died, was restarted, or is down (part, action, error)


@dataclass
class Timeline:
    clock: Callable[[], float]
    meta: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    frame_t: list[float] = field(default_factory=list)
    frame_late_ms: list[float] = field(default_factory=list)
    frame_step_ms: list[float] = field(default_factory=list)
    frame_oracle: list[int] = field(default_factory=list)
    frame_text: list[str] = field(default_factory=list)
    frame_vad: list[float] = field(default_factory=list)
    current_frame: int = 0
    # told every event as it is added (the session's turn machine, turn/machine.py); not saved
    observer: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False, compare=False)

    def add(self, kind: str, t: float | None = None, **data: Any) -> dict[str, Any]:
        ev = {"t": round(self.clock() if t is None else t, 4), "frame": self.current_frame, "kind": kind, **data}
        self.events.append(ev)
        if self.observer is not None:
            self.observer(ev)
        return ev

    def add_frame(self, t: float, late_ms: float, step_ms: float, oracle_token: int, text: str,
                  vad: float = -1.0) -> None:
        self.frame_t.append(round(t, 4))
        self.frame_late_ms.append(round(late_ms, 3))
        self.frame_step_ms.append(round(step_ms, 3))
        self.frame_oracle.append(int(oracle_token))
        self.frame_text.append(text)
        self.frame_vad.append(round(float(vad), 3))

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] in kinds]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SCHEMA_VERSION,
            "meta": self.meta,
            "events": self.events,
            "frames": {
                "t": self.frame_t,
                "late_ms": self.frame_late_ms,
                "step_ms": self.frame_step_ms,
                "oracle_token": self.frame_oracle,
                "text": self.frame_text,
                "vad": self.frame_vad,
            },
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False))


def load(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
