"""The hub: admission, sessions joining and leaving, and the one 80 ms clock that steps them all.

Each WebSocket connection is a `Client` (`connection.py`) holding its own `Session`. At every tick
the hub takes one frame of input from each client (what it sent in time, silence where it sent
nothing), runs the first half of every session's step, steps all front-ends in one batched call per
provider, runs the second halves, and hands each session's output to its client, which queues it
through the Opus encoder thread (`encoder.py`): one Ogg page every 80 ms, silent or not, plus its
text pieces and (when asked for) events. Nothing in a tick waits for a client. What `/api/status`
shows beyond the ticks (GC pauses, stalls, the back-end, resources) is `health.py`.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np
from aiohttp import web

from ..audio.frames import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from ..speak.frontend import FrontEnd
from ..think.oracle import DEFAULT_POLICY, make_policy
from ..turn.session import LiveStep, Session, SessionConfig
from ..speak.tts import Voicer
from . import protocol as proto
from .capacity import DEFAULT_MAX_SESSIONS
from .connection import Client
from .encoder import OutputEncoder
from .health import Health
from .record import Recorder
from .shared import Backend, SessionLLM

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HubConfig:
    session: SessionConfig = SessionConfig(mode="tandem", pace="realtime")
    max_sessions: int = DEFAULT_MAX_SESSIONS
    limits: proto.Limits = proto.Limits()
    record_dir: Path | None = None
    oracle_policy: str = DEFAULT_POLICY


T = TypeVar("T")


class Hub:
    """Every live session of one server, stepped together by one ticker (see the module's docstring)."""

    def __init__(self, backend: Backend, config: HubConfig) -> None:
        if config.max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.backend = backend
        self.config = config
        self.clients: dict[str, Client] = {}  # live or joining, in join order
        self._joining: list[Client] = []
        self._reserved = 0
        self._ticker: asyncio.Task | None = None
        self._encoder: OutputEncoder | None = None
        self.ticks = 0
        self.tick_ms: deque[float] = deque(maxlen=1000)
        self.phase_ms: dict[str, deque[float]] = {k: deque(maxlen=1000) for k in ("pre", "front_end", "post")}
        self.late_ticks = 0  # ticks that started more than one frame late
        self.sessions_total = 0
        self.closed_reasons: dict[str, int] = {}
        self.health = Health(backend)
        # blocking chores kept off the event loop (closing a session's voice and recorder, building a voice
        # meter): two threads at most, where asyncio's default executor would start one per client of a
        # burst of connects or disconnects
        self._chores = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tandem-chores")

    async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on one of the hub's chore threads."""
        return await asyncio.get_running_loop().run_in_executor(self._chores, functools.partial(fn, *args))

    # -- admission --------------------------------------------------------------------------------
    def reserve(self) -> bool:
        """Claim a place for a new connection before its upgrade; False when the server is full."""
        if self._reserved >= self.config.max_sessions:
            return False
        self._reserved += 1
        return True

    def unreserve(self) -> None:
        self._reserved = max(0, self._reserved - 1)

    @property
    def active(self) -> int:
        return self._reserved

    def create_client(self, ws: web.WebSocketResponse, events: bool, peer: str) -> Client:
        b, cfg = self.backend, self.config
        mode = cfg.session.mode
        front_end = voicer = None
        if mode in ("tandem", "frontend"):
            if b.front_ends is None:
                raise RuntimeError(f"mode {mode} needs a front-end")
            front_end = b.front_ends.open(b.tts)
        elif b.tts is not None:
            voicer = Voicer(b.tts)
        llm = b.llm.for_session() if b.llm is not None else None
        try:
            session = Session(cfg.session, b.listener, llm, voicer=voicer, front_end=front_end,
                              oracle_policy=make_policy(cfg.oracle_policy) if mode == "tandem" else None,
                              meta={"input": f"live:{peer}"}, supervisor=b.supervisor,
                              knowledge=b.knowledge if cfg.session.knowledge else None)
        except BaseException:
            _close_parts(front_end, voicer)
            if llm is not None:
                llm.close()
            raise
        recorder = Recorder(cfg.record_dir, session.sid) if cfg.record_dir else None
        client = Client(ws, session, front_end, voicer, events, peer, limits=cfg.limits, encoder=self.encoder,
                        recorder=recorder)
        self.sessions_total += 1
        return client

    def join(self, client: Client) -> None:
        """The ticker starts the session at its next tick and then sends the handshake."""
        client.start_sender()
        self.clients[client.sid] = client
        self._joining.append(client)
        self.ensure_ticker()

    async def leave(self, client: Client) -> None:
        """Free everything the client held; safe to call once per client, whatever state it is in."""
        self.clients.pop(client.sid, None)
        if client in self._joining:
            self._joining.remove(client)
        client.closing = True
        client.live = False
        reason = client.close_reason or "client closed"
        self.closed_reasons[reason] = self.closed_reasons.get(reason, 0) + 1
        try:
            if client.sender is not None:
                client.sender.cancel()
                await asyncio.gather(client.sender, return_exceptions=True)
            await client.session.close()
            # a voicer's thread may be waiting for the shared TTS: join it off the event loop
            await self.off_loop(_close_parts, client.front_end, client.voicer, True)
            if client.front_end is not None and hasattr(client.front_end, "close"):
                client.front_end.close()  # releases its front-end slot (on the loop, beside the ticker)
            if client.recorder is not None:
                await self.off_loop(client.recorder.close, client.session.timeline)
        finally:
            if isinstance(client.session.client, SessionLLM):
                client.session.client.close()  # its LLM slot, for the next session
            self.unreserve()

    # -- the ticker -------------------------------------------------------------------------------
    @property
    def encoder(self) -> OutputEncoder:
        """The one Opus encoder thread, started with the first client (it hands pages back to the running loop)."""
        if self._encoder is None:
            self._encoder = OutputEncoder(asyncio.get_running_loop())
        return self._encoder

    def ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._run(), name="ticker")

    async def _run(self) -> None:
        note_stall = self.health.note_stall
        start = time.perf_counter()
        j = 0
        while True:
            j += 1
            target = start + j * FRAME_S
            while True:  # asyncio.sleep is coarse: sleep most of the way, then yield to the deadline
                ahead = target - time.perf_counter()
                if ahead <= 0:
                    break
                await asyncio.sleep(ahead - 0.001 if ahead > 0.003 else 0)
            if -ahead > FRAME_S:
                self.late_ticks += 1
            p0 = time.perf_counter()
            try:
                self.tick(target)
            except Exception:  # noqa: BLE001 - the ticker must survive anything one tick does
                log.exception("tick failed")
            p1 = time.perf_counter()
            self.tick_ms.append((p1 - p0) * 1e3)
            self.ticks += 1
            note_stall(target, p1)
            await asyncio.sleep(0)

    def tick(self, target: float) -> None:
        """One frame for every live session. `target` is this tick's perf_counter deadline."""
        for c in self._joining:
            if c.closing:
                continue
            try:
                c.session.start_live(target - FRAME_S)  # this tick is its step 0, at session time 0.08 s
            except Exception as e:  # noqa: BLE001
                log.exception("session %s failed to start", c.sid)
                c.abort(f"the session could not start: {e}", code=1011)
                continue
            c.live = True
            c.send(proto.handshake())
            if c.events:
                c.send(proto.event({"type": "session", "sid": c.sid, "mode": self.config.session.mode,
                                    "sample_rate": SAMPLE_RATE, "frame_s": FRAME_S}))
        self._joining.clear()
        p0 = time.perf_counter()
        now = time.monotonic()
        lim = self.config.limits
        steps: list[tuple[Client, np.ndarray, LiveStep]] = []
        for c in list(self.clients.values()):
            if not c.live or c.closing:
                continue
            if now - c.last_audio > lim.idle_timeout_s:
                c.abort(f"idle timeout: no audio for {lim.idle_timeout_s:.0f} s", code=1000)
                continue
            if now - c.created > lim.session_timeout_s:
                c.abort(f"session time limit of {lim.session_timeout_s:.0f} s reached", code=1000)
                continue
            frame = c.inbuf.take()
            try:
                steps.append((c, frame, c.session.live_pre(frame)))
            except Exception as e:  # noqa: BLE001
                log.exception("session %s failed", c.sid)
                c.abort(f"internal error: {type(e).__name__}", code=1011)
        p1 = time.perf_counter()
        todo = [(c, st) for c, _, st in steps if st.audio is None]
        if todo:
            provider = self.backend.front_ends
            try:
                outs = provider.step_many([c.front_end for c, _ in todo], [st.user for _, st in todo],
                                          [st.oracle_token for _, st in todo])
                for (c, st), out in zip(todo, outs):
                    st.audio, st.texts = out.audio, list(out.text)
            except Exception as e:  # noqa: BLE001
                log.exception("front-end step failed")
                for c, st in todo:
                    c.abort(f"internal error in the front-end: {type(e).__name__}", code=1011)
                    st.audio = np.zeros(FRAME_SAMPLES, np.float32)
        p2 = time.perf_counter()
        # every session's step is complete (and timed) before any output is encoded and queued, so
        # one session's step time does not include the Opus encoding of the sessions before it
        done: list[tuple[Client, np.ndarray, LiveStep]] = []
        for c, frame, st in steps:
            if c.closing:
                continue
            try:
                c.session.live_post(st, st.audio, st.texts)
                done.append((c, frame, st))
            except Exception as e:  # noqa: BLE001
                log.exception("session %s failed", c.sid)
                c.abort(f"internal error: {type(e).__name__}", code=1011)
        for c, frame, st in done:
            try:
                c.output(st.audio, st.texts)
                if c.recorder is not None:
                    c.recorder.frame(frame, st.audio, c.session.timeline)
            except Exception as e:  # noqa: BLE001
                log.exception("session %s failed", c.sid)
                c.abort(f"internal error: {type(e).__name__}", code=1011)
        p3 = time.perf_counter()
        if steps:
            self.phase_ms["pre"].append((p1 - p0) * 1e3)
            self.phase_ms["front_end"].append((p2 - p1) * 1e3)
            self.phase_ms["post"].append((p3 - p2) * 1e3)

    # -- status -----------------------------------------------------------------------------------
    def readiness(self) -> dict[str, Any]:
        """Whether a new session would be taken now: a free place, and no back-end part down for good
        (what a load balancer's health check asks, `/api/health`)."""
        parts = self.backend.supervisor.status() if self.backend.supervisor is not None else {}
        down = sorted(name for name, st in parts.items() if st.get("state") == "down")
        full = self._reserved >= self.config.max_sessions
        return {"ready": not full and not down, "sessions": self._reserved, "max_sessions": self.config.max_sessions,
                "full": full, "down": down, "mode": self.config.session.mode}

    def status(self) -> dict[str, Any]:
        """The ticker's own counts, then its health (`Health.status`)."""
        ms = np.asarray(self.tick_ms, float)
        return {
            "sessions": len(self.clients), "reserved": self._reserved, "max_sessions": self.config.max_sessions,
            "mode": self.config.session.mode, "sessions_total": self.sessions_total, "ticks": self.ticks,
            "late_ticks": self.late_ticks,
            "tick_ms_p50": round(float(np.percentile(ms, 50)), 3) if len(ms) else 0.0,
            "tick_ms_p99": round(float(np.percentile(ms, 99)), 3) if len(ms) else 0.0,
            "phase_ms_p50": {k: round(float(np.percentile(v, 50)), 3) if v else 0.0 for k, v in self.phase_ms.items()},
            "phase_ms_p99": {k: round(float(np.percentile(v, 99)), 3) if v else 0.0 for k, v in self.phase_ms.items()},
            "closed": dict(self.closed_reasons),
            **self.health.status(),
        }

    async def aclose(self, timeout_s: float = 3.0) -> None:
        """Close every session (clients get a 0x05 message and a 1001 close) and wait for them to leave."""
        for c in list(self.clients.values()):
            c.abort("server shutting down", code=1001)
        deadline = time.monotonic() + timeout_s
        while self._reserved > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for c in list(self.clients.values()):  # did not leave in time: keep what they recorded
            if c.recorder is not None:
                c.recorder.close(c.session.timeline)
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        if self._encoder is not None:
            await self.off_loop(self._encoder.close)
            self._encoder = None
        self.health.close()
        self._chores.shutdown(wait=False)


def _close_parts(front_end: FrontEnd | None, voicer: Voicer | None, voicers_only: bool = False) -> None:
    """Stop the voicer threads (blocking: run off the event loop). Unless `voicers_only`, also close
    the front-end itself."""
    if voicer is not None:
        voicer.close()
    fe_voicer = getattr(front_end, "voicer", None)
    if fe_voicer is not None:
        fe_voicer.close()
        front_end.voicer = None
    if not voicers_only and front_end is not None and hasattr(front_end, "close"):
        front_end.close()
