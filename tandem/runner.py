"""`tandem run`: one wav file through one mode, with its outputs written next to each other."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .speak import frontend as fe_registry
from .audio.frames import InputAudio, frames_of, load_input, write_stereo
from .think.oracle import DEFAULT_POLICY, make_policy
from .runtime.realtime import settle_heap
from .turn.session import Session, SessionConfig
from .runtime.stack import Stack
from .record.timeline import Timeline
from .speak.tts import Voicer

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    assistant: np.ndarray
    timeline: Timeline
    input: InputAudio


def run_session(stack: Stack, audio: InputAudio, config: SessionConfig, front_end_name: str = "compact",
                oracle_policy: str = DEFAULT_POLICY, meta: dict | None = None,
                front_end_kwargs: dict | None = None, finish_reply_s: float = 0.0) -> RunResult:
    """One session over `audio`. With `finish_reply_s`, the session goes on past the input's end (for at
    most that long) until the assistant has finished its reply, and the result is as long as that."""
    front_end = None
    if config.mode in ("tandem", "frontend"):
        front_end = fe_registry.build(front_end_name, tts=stack.tts, **(front_end_kwargs or {}))

    async def go() -> RunResult:
        client = stack.client()
        voicer = Voicer(stack.tts) if stack.tts is not None and config.mode == "cascade" else None
        try:
            session = Session(config, stack.listener, client, voicer=voicer, front_end=front_end,
                              oracle_policy=make_policy(oracle_policy) if config.mode == "tandem" else None,
                              meta=meta, supervisor=stack.supervisor,
                              knowledge=stack.knowledge if config.knowledge else None)
            assistant = await session.run(frames_of(audio.samples), finish_reply_s)
            # as long as the input, unless the reply went on past its end
            extra = session.timeline.meta.get("finished_reply_s", 0.0)
            n = len(audio.samples) if not extra else max(len(audio.samples), len(assistant))
            return RunResult(assistant[:n], session.timeline, audio)
        finally:
            if voicer is not None:
                voicer.close()
            if front_end is not None and hasattr(front_end, "close"):
                front_end.close()
            if client is not None:
                await client.aclose()

    settle_heap()  # the front-end just built and the last session's garbage, out of the frames' way
    return asyncio.run(go())


def write_outputs(result: RunResult, out_wav: Path | None, timeline_json: Path | None, plot_png: Path | None) -> None:
    n = max(len(result.input.samples), len(result.assistant))
    if out_wav:
        write_stereo(out_wav, result.input.samples, result.assistant, n)
    if timeline_json:
        result.timeline.meta["input_duration_s"] = round(n / 24000, 3)
        result.timeline.save(timeline_json)
    if plot_png:
        from .record.plot import plot_timeline

        plot_timeline(result.timeline.to_dict(), plot_png, user=result.input.samples, assistant=result.assistant)


def load(path: str | Path) -> InputAudio:
    return load_input(path)
