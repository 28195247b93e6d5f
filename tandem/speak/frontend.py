"""The front-end interface: one step per 80 ms frame, never waiting for anything.

A front-end module registers a factory under a name; `tandem run --front-end NAME` builds it.
The session calls `step` (or `step_batch` for many sessions) once per frame with what the user
did in that frame and the oracle token for that frame.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from ..runtime.errors import FrontEndUnavailable


class Tokenizer(Protocol):
    start_id: int  # the oracle stream's start token (KAME: the text start id)
    pad_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


VOICE_THRESHOLD = 0.5  # the voice-activity probability above which the user counts as speaking
BARGE_IN_FRAMES = 3  # user speech this long while the assistant talks stops the assistant (every mode)


def speaking(vad_prob: float) -> bool:
    """The one definition of "the user is speaking now" for front-ends, replay and evaluation."""
    return vad_prob > VOICE_THRESHOLD


@dataclass
class UserFrame:
    audio: np.ndarray  # 1920 float32 samples at 24 kHz
    vad_prob: float  # latest voice-activity probability the Listener reported
    in_speech: bool
    transcript: str = ""  # the user's turn as the Listener hears it now (front-ends diff it themselves)
    # the oracle stream answers the turn's final transcript: no newer transcript of the turn will replace it
    oracle_settled: bool = False
    # with a settled oracle, the tokens it holds for the frames after this one (OracleStream.upcoming); None: unknown
    oracle_upcoming: tuple[int, ...] | None = None


@dataclass
class FrontEndOutput:
    audio: np.ndarray  # 1920 float32 samples at 24 kHz
    text: list[str] = field(default_factory=list)  # text pieces whose audio starts in this frame


class FrontEnd(Protocol):
    name: str
    tokenizer: Tokenizer

    def reset(self) -> None: ...

    def step(self, user: UserFrame, oracle_token: int) -> FrontEndOutput: ...

    def step_batch(self, users: list[UserFrame], oracle_tokens: list[int]) -> list[FrontEndOutput]: ...

    # optional: `follow_turns(machine)`, for a front-end that judges talk-over itself (the compact one's
    # mouth), takes the session's turn machine (tandem/turn/machine.py) so that its moves are the session's


FrontEndFactory = Callable[..., FrontEnd]
_REGISTRY: dict[str, FrontEndFactory] = {}


def register(name: str, factory: FrontEndFactory) -> None:
    _REGISTRY[name] = factory


def available() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def build(name: str, **kwargs) -> FrontEnd:
    _load_builtin()
    if name not in _REGISTRY:
        have = ", ".join(sorted(_REGISTRY)) or "none yet"
        raise FrontEndUnavailable(
            f"front-end {name!r} is not available in this installation (available: {have}); "
            f"--mode cascade works without a front-end")
    return _REGISTRY[name](**kwargs)


def _load_builtin() -> None:
    import importlib

    for mod in ("tandem.frontends.compact", "tandem.frontends.moshi"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod and not mod.startswith(str(e.name)):
                raise
