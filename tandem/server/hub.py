"""Live sessions of one server, stepped together by one 80 ms ticker.

Each WebSocket connection is a `Client` holding its own `Session`. At every tick the hub takes one
frame of input from each client (what it sent in time, silence where it sent nothing), runs the
first half of every session's step, steps all front-ends in one batched call per provider, runs
the second halves, and queues each session's output for its client: one Ogg-Opus page every
80 ms, silent or not, plus its text pieces and (when asked for) events. Nothing in a tick waits
for a client: output goes through a bounded per-client queue drained by its own sender task, and a
client that stops reading is closed rather than allowed to hold up the others.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sphn
from aiohttp import WSMsgType, web

from .. import timeline as tl
from ..audio import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from ..frontend import FrontEnd
from ..oracle import DEFAULT_POLICY, make_policy
from ..session import LiveStep, Session, SessionConfig
from ..tts import TTS, Voicer
from . import protocol as proto
from .record import Recorder
from .shared import FrontEndProvider, SharedLLM

log = logging.getLogger(__name__)


@dataclass
class Backend:
    """What the sessions share: the Listener (process or fake), the LLM, the TTS, the front-ends."""
    listener: Any
    llm: SharedLLM | None
    tts: TTS | None
    front_ends: FrontEndProvider | None
    supervisor: Any = None  # tandem.children.Supervisor watching the child processes, when there are any


@dataclass(frozen=True)
class HubConfig:
    session: SessionConfig = SessionConfig(mode="tandem", pace="realtime")
    max_sessions: int = 4
    limits: proto.Limits = proto.Limits()
    record_dir: Path | None = None
    oracle_policy: str = DEFAULT_POLICY


class InputBuffer:
    """Decoded client audio waiting for the ticker. The ticker takes one frame per tick, padded
    with silence when the client has not sent enough in time (an underrun); beyond `max_samples`
    the oldest audio is dropped (a client sending faster than real time must not build latency)."""

    def __init__(self, max_samples: int) -> None:
        self.max_samples = max_samples
        self._chunks: deque[np.ndarray] = deque()
        self.size = 0
        self.started = False
        self.underruns = 0
        self.dropped_samples = 0

    def push(self, pcm: np.ndarray) -> None:
        if not len(pcm):
            return
        self._chunks.append(np.asarray(pcm, np.float32))
        self.size += len(pcm)
        self.started = True
        while self.size > self.max_samples:
            excess = self.size - self.max_samples
            head = self._chunks[0]
            if len(head) <= excess:
                self._chunks.popleft()
                self.size -= len(head)
                self.dropped_samples += len(head)
            else:
                self._chunks[0] = head[excess:]
                self.size -= excess
                self.dropped_samples += excess

    def take(self, n: int = FRAME_SAMPLES) -> np.ndarray:
        out = np.zeros(n, np.float32)
        filled = 0
        while filled < n and self._chunks:
            head = self._chunks[0]
            m = min(n - filled, len(head))
            out[filled: filled + m] = head[:m]
            filled += m
            if m == len(head):
                self._chunks.popleft()
            else:
                self._chunks[0] = head[m:]
        self.size -= filled
        if filled < n and self.started:
            self.underruns += 1
        return out


# timeline event kind -> extension event type (docs/PROTOCOL.md)
_EVENT_TYPES = {
    tl.VAD_START: "vad_start", tl.VAD_END: "vad_end", tl.PARTIAL: "partial", tl.FINAL: "final",
    tl.LLM_START: "llm_start", tl.LLM_FIRST_TOKEN: "llm_first_token", tl.ORACLE_RESET: "oracle_reset",
    tl.ORACLE_APPEND: "oracle", tl.ASSISTANT_TEXT: "assistant_text", tl.ASSISTANT_AUDIO_START: "assistant_audio_start",
    tl.LLM_ERROR: "error", tl.ERROR: "error", tl.FAULT: "fault",
}
_EVENT_FIELDS = ("text", "audio_s", "audio_start_s", "stale_s", "ttft_s", "stream", "error", "source", "part", "action")


@dataclass
class _TurnLatency:
    """Onset latency per user turn: end of speech (VAD, audio time) -> first assistant audio after it.
    The assistant may start before the end-of-speech event arrives (it is emitted after 400 ms of
    silence), so starts are remembered until the turn's end is known."""
    speech_end: float | None = None
    final_t: float | None = None
    starts: list[float] = field(default_factory=list)

    def on(self, ev: dict[str, Any]) -> dict[str, Any] | None:
        kind = ev["kind"]
        if kind == tl.VAD_START:
            self.starts.clear()
        elif kind == tl.VAD_END:
            self.speech_end, self.final_t = ev["audio_s"], None
            return self._match()
        elif kind == tl.FINAL and self.speech_end is not None:
            self.final_t = ev["t"]
        elif kind == tl.ASSISTANT_AUDIO_START:
            self.starts.append(ev["t"])
            return self._match()
        return None

    def _match(self) -> dict[str, Any] | None:
        if self.speech_end is None:
            return None
        after = [t for t in self.starts if t >= self.speech_end]
        if not after:
            return None
        out = {"type": "latency", "speech_end_s": round(self.speech_end, 3), "onset_s": round(after[0] - self.speech_end, 3)}
        if self.final_t is not None:
            out["final_s"] = round(self.final_t - self.speech_end, 3)
        self.speech_end, self.starts = None, []
        return out


class Client:
    """One WebSocket connection and its live session."""

    def __init__(self, hub: "Hub", ws: web.WebSocketResponse, session: Session, front_end: FrontEnd | None,
                 voicer: Voicer | None, events: bool, peer: str) -> None:
        lim = hub.config.limits
        now = time.monotonic()
        self.hub = hub
        self.ws = ws
        self.session = session
        self.front_end = front_end
        self.voicer = voicer
        self.events = events
        self.peer = peer
        self.limits = lim
        self.reader = sphn.OpusStreamReader(SAMPLE_RATE)
        self.writer = sphn.OpusStreamWriter(SAMPLE_RATE)
        self.inbuf = InputBuffer(int(lim.max_buffered_s * SAMPLE_RATE))
        self.recorder = Recorder(hub.config.record_dir, session.sid) if hub.config.record_dir else None
        self.sendq: asyncio.Queue[bytes | tuple[int, str]] = asyncio.Queue(maxsize=lim.send_queue_messages)
        self.sender: asyncio.Task | None = None
        self._closer: asyncio.Task | None = None  # a close that could not wait in the send queue
        self.msg_bucket = proto.TokenBucket(lim.max_messages_per_s, lim.message_burst, now)
        self.byte_bucket = proto.TokenBucket(lim.max_bytes_per_s, lim.byte_burst, now)
        self.created = now
        self.last_audio = now
        self.strikes = 0
        self.live = False
        self.closing = False
        self.close_reason: str | None = None
        self.messages_in = 0
        self.pages_out = 0
        self.misses = 0
        self._frames_seen = 0
        self._events_seen = 0
        self._turns = _TurnLatency()

    @property
    def sid(self) -> str:
        return self.session.sid

    # -- outgoing -------------------------------------------------------------------------------
    def start_sender(self) -> None:
        self.sender = asyncio.get_running_loop().create_task(self._send_loop(), name=f"send-{self.sid}")

    def send(self, msg: bytes) -> None:
        if self.closing:
            return
        try:
            self.sendq.put_nowait(msg)
        except asyncio.QueueFull:
            self.abort("the client is not reading its messages", code=1008, notify=False)

    async def _send_loop(self) -> None:
        try:
            while True:
                msg = await self.sendq.get()
                if isinstance(msg, tuple):
                    code, reason = msg
                    await self.ws.close(code=code, message=reason.encode()[:120])
                    return
                await self.ws.send_bytes(msg)
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            return  # the connection is gone; the handler cleans up
        except Exception:  # noqa: BLE001 - never let one client's send error escape
            log.exception("sending to %s failed", self.peer)

    def abort(self, reason: str, code: int = 1008, notify: bool = True) -> None:
        """Close this connection: a 0x05 error with the reason (when the queue has room), then the close."""
        if self.closing:
            return
        self.closing = True
        self.close_reason = reason
        log.info("closing %s (%s): %s", self.sid, self.peer, reason)
        try:
            if notify:
                self.sendq.put_nowait(proto.error(reason))
            self.sendq.put_nowait((code, reason))
        except asyncio.QueueFull:  # the client is not reading: close now, without the message
            self._closer = asyncio.get_running_loop().create_task(
                self.ws.close(code=code, message=reason.encode()[:120]))

    def error(self, message: str) -> None:
        """A malformed message: answer with an error, and close after too many of them."""
        self.strikes += 1
        if self.strikes > self.limits.max_strikes:
            self.abort(f"too many malformed messages; last: {message}", code=1008)
        else:
            self.send(proto.error(message))

    # -- incoming -------------------------------------------------------------------------------
    def on_message(self, msg: Any) -> None:
        if self.closing:
            return
        now = time.monotonic()
        self.messages_in += 1
        if msg.type == WSMsgType.TEXT:
            size = len(msg.data.encode("utf-8", "replace"))
        elif msg.type == WSMsgType.BINARY:
            size = len(msg.data)
        else:
            return
        if not self.msg_bucket.take(1, now) or not self.byte_bucket.take(size, now):
            self.abort("rate limit exceeded: too many messages or bytes per second", code=1008)
            return
        if msg.type == WSMsgType.TEXT:
            self.error("text frames are not part of the protocol; send binary messages (kind byte + payload)")
            return
        data: bytes = msg.data
        if not data:
            self.error("empty message: every message starts with a kind byte")
            return
        kind = data[0]
        if kind not in proto.KNOWN_FROM_CLIENT:
            self.error(f"unknown or unexpected message kind 0x{kind:02x} from a client")
            return
        if kind != proto.AUDIO:
            return  # control, metadata and ping are accepted and ignored
        self.last_audio = now
        try:
            pcm = self.reader.append_bytes(data[1:])
        except Exception as e:  # noqa: BLE001 - the decoder raises ValueError; anything else is as fatal
            # an Ogg stream cannot be resynchronised after a corrupt page: this connection is done
            self.abort(f"corrupt Ogg-Opus audio: {e}", code=1007)
            return
        if pcm is not None and len(pcm):
            self.inbuf.push(np.asarray(pcm, np.float32).reshape(-1))

    # -- per tick -------------------------------------------------------------------------------
    def output(self, audio: np.ndarray, texts: list[str]) -> None:
        """Queue this frame's output: the audio is encoded off the event loop, then `deliver` sends
        the page and, after it, the text pieces and events of the same frame."""
        msgs = [proto.text(" " + piece) for piece in texts]  # Moshi's pieces carry their own leading space
        t = self.session.timeline
        for k in range(self._frames_seen, len(t.frame_t)):
            if t.frame_late_ms[k] + t.frame_step_ms[k] > FRAME_S * 1e3:
                self.misses += 1
        self._frames_seen = len(t.frame_t)
        if self.events:
            msgs += self._event_messages()
        self.hub.encoder.encode(self, np.ascontiguousarray(audio, np.float32), msgs)

    def deliver(self, page: bytes, msgs: list[bytes]) -> None:
        """On the event loop, in frame order: one Ogg page, then what else the frame produced."""
        if self.closing:
            return
        if page:
            self.send(proto.audio(page))
            self.pages_out += 1
        for m in msgs:
            self.send(m)

    def _event_messages(self) -> list[bytes]:
        out: list[bytes] = []
        evs = self.session.timeline.events
        for ev in evs[self._events_seen:]:
            typ = _EVENT_TYPES.get(ev["kind"])
            if typ is not None:
                out.append(proto.event({"type": typ, "t": ev["t"], **{k: ev[k] for k in _EVENT_FIELDS if k in ev}}))
            lat = self._turns.on(ev)
            if lat is not None:
                out.append(proto.event({"t": ev["t"], **lat}))
        self._events_seen = len(evs)
        if len(self.session.timeline.frame_t) % 13 == 0:  # about once a second
            out.append(proto.event(self.stats()))
        return out

    def stats(self) -> dict[str, Any]:
        t = self.session.timeline
        late = np.asarray(t.frame_late_ms[-250:], float)
        return {"type": "stats", "t": round(self.session.clock.now(), 3), "frames": len(t.frame_t),
                "deadline_misses": self.misses, "late_p99_ms": round(float(np.percentile(late, 99)), 2) if len(late) else 0.0,
                "underruns": self.inbuf.underruns, "dropped_s": round(self.inbuf.dropped_samples / SAMPLE_RATE, 3)}


class OutputEncoder:
    """Opus-encodes every session's output frame on a thread of its own, in tick order, and hands each
    page back to the event loop for sending. sphn gives up the GIL while it encodes, so the encoding
    (about a third of a tick's work with 8 sessions) runs beside the ticker instead of inside it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._q: queue.SimpleQueue[tuple[Client, np.ndarray, list[bytes]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="opus-out", daemon=True)
        self._thread.start()

    def encode(self, client: Client, audio: np.ndarray, msgs: list[bytes]) -> None:
        self._q.put((client, audio, msgs))

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            client, audio, msgs = item
            if client.closing:
                continue
            try:
                page = client.writer.append_pcm(audio)
            except Exception:  # noqa: BLE001 - a bad frame must not stop every session's audio
                log.exception("Opus encoding failed for %s", client.sid)
                page = b""
            try:
                self._loop.call_soon_threadsafe(client.deliver, page, msgs)
            except RuntimeError:  # the loop is closed: the server is gone
                return

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=2)


class GcWatch:
    """How long the garbage collector stops the process (every thread, the ticker included)."""

    def __init__(self) -> None:
        self.max_ms = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._t0 = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            g = info.get("generation", 2)
            self.count[g] += 1
            self.max_ms[g] = max(self.max_ms[g], (time.perf_counter() - self._t0) * 1e3)

    def close(self) -> None:
        if self._cb in gc.callbacks:
            gc.callbacks.remove(self._cb)


class Hub:
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
        self.gc = GcWatch()
        self.stalls: deque[dict[str, float]] = deque(maxlen=50)  # late ticks and the CPU wait behind them
        self._last_wait_ns: int | None = None

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
        try:
            session = Session(cfg.session, b.listener, b.llm, voicer=voicer, front_end=front_end,
                              oracle_policy=make_policy(cfg.oracle_policy) if mode == "tandem" else None,
                              meta={"input": f"live:{peer}"}, supervisor=b.supervisor)
        except BaseException:
            _close_parts(front_end, voicer)
            raise
        client = Client(self, ws, session, front_end, voicer, events, peer)
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
            await asyncio.to_thread(_close_parts, client.front_end, client.voicer, True)
            if client.front_end is not None and hasattr(client.front_end, "close"):
                client.front_end.close()  # releases its front-end slot (on the loop, beside the ticker)
            if client.recorder is not None:
                await asyncio.to_thread(client.recorder.close, client.session.timeline)
        finally:
            self.unreserve()

    # -- the ticker -------------------------------------------------------------------------------
    @property
    def encoder(self) -> OutputEncoder:
        if self._encoder is None:
            self._encoder = OutputEncoder(asyncio.get_running_loop())
        return self._encoder

    def ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._run(), name="ticker")

    async def _run(self) -> None:
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
            self._note_stall(target, p1)
            await asyncio.sleep(0)

    def _note_stall(self, target: float, done: float) -> None:
        """A tick that finished more than 60 ms after its deadline: record how long this thread
        waited for a CPU meanwhile (the kernel's run-queue wait), which tells a machine too busy
        to run the server from a server that held itself up."""
        wait_ns = _runqueue_wait_ns()
        late_ms = (done - target) * 1e3
        if late_ms > 60 and wait_ns is not None and self._last_wait_ns is not None:
            self.stalls.append({"late_ms": round(late_ms, 1),
                                "runqueue_wait_ms": round((wait_ns - self._last_wait_ns) / 1e6, 1)})
        self._last_wait_ns = wait_ns

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
    def status(self) -> dict[str, Any]:
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
            "llm": {"waiting": self.backend.llm.waiting, "running": self.backend.llm.running} if self.backend.llm else None,
            "resources": self.resources(),
            "backend": self.backend_health(),
            "gc": {"count": list(self.gc.count), "max_ms": [round(x, 2) for x in self.gc.max_ms]},
            "stalls": list(self.stalls),
        }

    def backend_health(self) -> dict[str, Any]:
        """Each child process: up, restarting or down, its restarts and last fault; and what the
        bounded queues in front of them dropped."""
        b = self.backend
        out: dict[str, Any] = b.supervisor.status() if b.supervisor is not None else {}
        dropped = getattr(b.listener, "dropped_frames", None)
        if dropped is not None:
            out.setdefault("Listener", {})["dropped_frames"] = dropped
        timeouts = getattr(b.tts, "timeouts", None)
        if timeouts is not None:
            out.setdefault("voice", {})["timeouts"] = timeouts
        return out

    def resources(self) -> dict[str, Any]:
        """What a leak would show: this process's threads and file descriptors, open Listener streams,
        front-end rows in use (where the front-end has a shared pool)."""
        import os
        import threading

        listener = self.backend.listener
        streams = getattr(listener, "_callbacks", None)
        if streams is None:
            streams = getattr(listener, "callbacks", {})
        pool = getattr(self.backend.front_ends, "pool", None)
        try:
            fds = len(os.listdir("/proc/self/fd"))
        except OSError:
            fds = -1
        import psutil

        return {"threads": threading.active_count(), "fds": fds, "listener_streams": len(streams),
                "front_end_rows": getattr(pool, "in_use", None),
                "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1)}

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
            await asyncio.to_thread(self._encoder.close)
            self._encoder = None
        self.gc.close()


def _runqueue_wait_ns() -> int | None:
    """Nanoseconds this thread has spent runnable but waiting for a CPU (Linux schedstat), or None."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


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
