"""A session's options and the record of one live step, apart from the session itself (session.py) so
that what builds sessions (the server, the bench) reads them without the frame loop."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..speak.frontend import UserFrame
from .streams import SchedulerConfig

MODES = ("tandem", "frontend", "cascade")


@dataclass
class LiveStep:
    """One live step between `Session.live_pre` and `Session.live_post`."""
    k: int
    t0: float  # session time the step started
    p0: float  # perf_counter at the start, for the step time
    oracle_token: int  # -1 in cascade mode
    user: UserFrame | None = None  # what the front-end hears this frame (None in cascade mode)
    audio: np.ndarray | None = None  # set when the output needs no front-end step (cascade mode)
    texts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SessionConfig:
    mode: str = "cascade"
    pace: str = "realtime"  # or "fast" (see clock.py)
    event_budget_ms: float = 2.0
    scheduler: SchedulerConfig = SchedulerConfig()  # its prompt_form is the cascade's too
    cascade_max_tokens: int = 80
    extractive: bool = True  # with knowledge, a sentence of a document that answers outright is an oracle
    knowledge: bool = True  # use the stack's knowledge base, when it has one (False: a bench's side-by-side run)
    # the user's voice activity measured in the frame loop on the frame just received (listener/frame_vad.py);
    # False: as the Listener process last reported it, one or two frames later
    frame_vad: bool = True
    # a pause after words that stop inside a clause holds the floor for the user (turn/unfinished.py, the turn
    # machine's user_unfinished state); False: silence alone decides, as before 2026-12-07
    hold_unfinished: bool = True
    # whole words at a pause are read again by the embedded LLM (llm/turn_end.py): a message it reads as going
    # on holds the floor for a listener's pause (the machine's user_may_go_on); only with the embedded LLM
    judge_turn_end: bool = True
    # two statements in a row since the last reply hold the floor for the user through their pauses until a reading
    # ends it (turn/telling.py, the machine's user_telling); False: each pause is judged alone, as before 2026-12-07
    hold_telling: bool = True
