"""One WebSocket connection: the protocol in and out, around its live session.

A `Client` decodes what its peer sends (Ogg-Opus audio, checked against the message and byte rate
limits) into an `InputBuffer` the ticker takes one frame from per tick, and turns what the ticker
hands back for each frame into messages: the Ogg page (encoded on the encoder thread), the text
pieces and, when asked for, events, among them each turn's latency (`_TurnLatency`). It never
waits for its peer: messages go through a bounded queue drained by a sender task of its own, and a
peer that stops reading is closed rather than allowed to hold up the other sessions.

The connection knows nothing of the hub that steps it: it is given its limits, its recorder and the
encoder its output goes through.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import sphn
from aiohttp import WSMsgType, web

from ..record import timeline as tl
from ..audio.frames import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from ..speak.frontend import FrontEnd
from ..turn.session import Session
from ..speak.tts import Voicer
from . import protocol as proto
from .record import Recorder

if TYPE_CHECKING:
    from .encoder import OutputEncoder

log = logging.getLogger(__name__)


class InputBuffer:
    """Decoded client audio waiting for the ticker. The ticker takes one frame per tick, padded
    with silence when the client has not sent enough in time (an underrun); beyond `max_samples`
    the oldest audio is dropped (a client sending faster than real time must not build latency).

    Audio that arrives in a burst (the session went live after the client had started sending, a
    stall of the server or of the network) would otherwise wait here for the rest of the session,
    delaying every later word the user says by as much: the lowest level over the last `window`
    takes is such standing lag (what jitter alone explains comes and goes within a few ticks). Beyond
    `keep_samples` of it, the quiet head of the buffer is skipped in a pause (MIN_PAUSE of quiet
    waiting, never the quiet inside a word), so that no speech the Listener needs is lost. `keep_samples` < 0 turns this off.

    The first take waits until a frame and `keep_samples` have come (silence until then, as before
    the client's first audio), so that a client a few milliseconds behind the ticker's phase does not
    start with underruns. A take that comes up short counts as an underrun only once more audio
    arrives: a client that was late, not one that stopped sending (its last seconds before closing)."""

    QUIET_RMS = 0.01  # a 10 ms block below this (-40 dBFS) is quiet
    BLOCK = SAMPLE_RATE // 100
    MIN_PAUSE = SAMPLE_RATE // 4  # quiet this long at the head is a pause between words or turns
    PAUSE_LEFT = SAMPLE_RATE // 10  # of which this much is never skipped

    def __init__(self, max_samples: int, keep_samples: int = -1, window: int = 25) -> None:
        self.max_samples = max_samples
        self.keep_samples = keep_samples
        self._chunks: deque[np.ndarray] = deque()
        self.size = 0
        self.started = False  # the client has sent audio
        self.primed = False  # enough of it has come to start taking
        self.underruns = 0
        self._short: list[int] = []  # takes that came up short, counted once more audio arrives
        self._quiet_taken = 0  # quiet samples at the end of what was taken: the pause under way
        self.dropped_samples = 0
        self.skipped_samples = 0  # quiet audio skipped to end a standing lag
        self.takes = 0
        self.underrun_takes: deque[int] = deque(maxlen=20)  # which takes (from the first audio) came up short
        self.waiting: deque[int] = deque(maxlen=250)  # samples left waiting after each take: the input's lag
        self._recent: deque[int] = deque(maxlen=window)

    def push(self, pcm: np.ndarray) -> None:
        if not len(pcm):
            return
        self._chunks.append(np.asarray(pcm, np.float32))
        self.size += len(pcm)
        self.started = True
        self.primed = self.primed or self.size >= FRAME_SAMPLES + max(0, self.keep_samples)
        if self._short:
            self.underruns += len(self._short)
            self.underrun_takes.extend(self._short)
            self._short = []
        while self.size > self.max_samples:
            self._drop_head(self.size - self.max_samples)

    def _drop_head(self, n: int, counted: bool = True) -> None:
        while n > 0 and self._chunks:
            head = self._chunks[0]
            m = min(n, len(head))
            if m == len(head):
                self._chunks.popleft()
            else:
                self._chunks[0] = head[m:]
            self.size -= m
            n -= m
            if counted:
                self.dropped_samples += m
            else:
                self.skipped_samples += m

    def take(self, n: int = FRAME_SAMPLES) -> np.ndarray:
        out = np.zeros(n, np.float32)
        if not self.primed:
            return out
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
        if filled < n:
            self._short.append(self.takes)
        self.takes += 1
        q = self._quiet_run(out[:filled][::-1]) if filled else 0
        self._quiet_taken = self._quiet_taken + filled if q == filled - filled % self.BLOCK and filled else q
        self.waiting.append(self.size)
        self._recent.append(self.size)
        self._end_standing_lag()
        return out

    def _end_standing_lag(self) -> None:
        if self.keep_samples < 0 or len(self._recent) < (self._recent.maxlen or 0):
            return
        excess = min(self._recent) - self.keep_samples
        if excess < self.BLOCK:
            return
        # only inside a real pause: a stop consonant's closure or the hiss of an "s" is as quiet, and
        # skipping it changes the word ("spider" was heard as "side or"); some quiet is left before
        # the next sound, as the Listener's voice activity detector expects
        quiet = self._quiet_run(np.concatenate(list(self._chunks))) if self._chunks else 0
        if self._quiet_taken + quiet >= self.MIN_PAUSE:
            skip = min(excess, quiet - max(0, self.PAUSE_LEFT - self._quiet_taken))
            skip -= skip % self.BLOCK
            if skip > 0:
                self._drop_head(skip, counted=False)
                self._recent.clear()  # the levels before the skip no longer say anything

    def _quiet_run(self, x: np.ndarray) -> int:
        """How many samples (whole 10 ms blocks) at the start of `x` are quiet."""
        if len(x) < self.BLOCK:
            return 0
        blocks = x[: len(x) - len(x) % self.BLOCK].reshape(-1, self.BLOCK)
        loud = np.sqrt((blocks ** 2).mean(axis=1)) >= self.QUIET_RMS
        first_loud = int(np.argmax(loud)) if loud.any() else len(blocks)
        return first_loud * self.BLOCK

    def lag_ms(self) -> float:
        """Median audio left waiting after a take over the last ~20 s: how long the client's speech sits
        here before the session hears it."""
        return round(float(np.median(self.waiting)) / SAMPLE_RATE * 1e3, 1) if self.waiting else 0.0


# what a client hears (0x05) when the LLM stops answering: the session itself goes on
LLM_AWAY = ("the assistant's LLM is unavailable: the conversation goes on with the front-end alone until it answers "
            "again")

# timeline event kind -> extension event type (docs/PROTOCOL.md)
_EVENT_TYPES = {
    tl.VAD_START: "vad_start", tl.VAD_END: "vad_end", tl.PARTIAL: "partial", tl.FINAL: "final",
    tl.LLM_START: "llm_start", tl.LLM_FIRST_TOKEN: "llm_first_token", tl.ORACLE_RESET: "oracle_reset",
    tl.ORACLE_APPEND: "oracle", tl.ASSISTANT_TEXT: "assistant_text", tl.ASSISTANT_AUDIO_START: "assistant_audio_start",
    tl.LLM_ERROR: "error", tl.ERROR: "error", tl.FAULT: "fault", tl.RETRIEVAL: "retrieval",
    tl.EXTRACTIVE: "extractive",
}
_EVENT_FIELDS = ("text", "audio_s", "audio_start_s", "stale_s", "ttft_s", "stream", "error", "unavailable", "source", "part", "action",
                 "query", "trigger", "ms", "passages", "match")


@dataclass
class _TurnLatency:
    """Each user turn's latency for the client: the session's onset (end of speech -> first audible
    assistant frame after it, `metrics.TurnOnsets`) and, when the final transcript came first, how
    long after the end of speech it came."""
    speech_end: float | None = None
    final_t: float | None = None

    def on(self, ev: dict[str, Any]) -> dict[str, Any] | None:
        kind = ev["kind"]
        if kind == tl.VAD_END:
            self.speech_end, self.final_t = ev["audio_s"], None
        elif kind == tl.FINAL and self.speech_end is not None and self.final_t is None:
            self.final_t = ev["t"]
        elif kind == tl.TURN_ONSET:
            out = {"type": "latency", "speech_end_s": ev["speech_end_s"], "onset_s": ev["onset_s"]}
            if self.final_t is not None and self.speech_end is not None and abs(self.speech_end - ev["speech_end_s"]) < 2e-3:
                out["final_s"] = round(self.final_t - ev["speech_end_s"], 3)
            return out
        return None


class Client:
    """One WebSocket connection and its live session."""

    def __init__(self, ws: web.WebSocketResponse, session: Session, front_end: FrontEnd | None,
                 voicer: Voicer | None, events: bool, peer: str, *, limits: proto.Limits,
                 encoder: OutputEncoder, recorder: Recorder | None = None) -> None:
        now = time.monotonic()
        self.ws = ws
        self.session = session
        self.front_end = front_end
        self.voicer = voicer
        self.events = events
        self.peer = peer
        self.limits = limits
        self.encoder = encoder
        self.reader = sphn.OpusStreamReader(SAMPLE_RATE)
        self.writer = sphn.OpusStreamWriter(SAMPLE_RATE)  # used on the encoder thread only
        self.inbuf = InputBuffer(int(limits.max_buffered_s * SAMPLE_RATE),
                                 int(limits.input_keep_s * SAMPLE_RATE) if limits.input_keep_s >= 0 else -1)
        self.recorder = recorder
        self.sendq: asyncio.Queue[bytes | tuple[int, str]] = asyncio.Queue(maxsize=limits.send_queue_messages)
        self.sender: asyncio.Task | None = None
        self._closer: asyncio.Task | None = None  # a close that could not wait in the send queue
        self.msg_bucket = proto.TokenBucket(limits.max_messages_per_s, limits.message_burst, now)
        self.byte_bucket = proto.TokenBucket(limits.max_bytes_per_s, limits.byte_burst, now)
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
        self._llm_away = False  # this client was told the LLM is unavailable, and it has not answered since

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
        new = self.session.timeline.events[self._events_seen:]
        self._events_seen += len(new)
        msgs += [m for m in map(self._llm_notice, new) if m is not None]
        if self.events:
            msgs += self._event_messages(new)
        self.encoder.encode(self, np.ascontiguousarray(audio, np.float32), msgs)

    def deliver(self, page: bytes, msgs: list[bytes]) -> None:
        """On the event loop, in frame order: one Ogg page, then what else the frame produced."""
        if self.closing:
            return
        if page:
            self.send(proto.audio(page))
            self.pages_out += 1
        for m in msgs:
            self.send(m)

    def _llm_notice(self, ev: dict[str, Any]) -> bytes | None:
        """One error message (0x05) when the LLM goes away, whatever the client; none again until it is back."""
        if ev["kind"] == tl.LLM_ERROR and ev.get("unavailable") and not self._llm_away:
            self._llm_away = True
            log.info("%s: told the client that the LLM is unavailable", self.sid)
            return proto.error(LLM_AWAY)
        if ev["kind"] == tl.LLM_FIRST_TOKEN:
            self._llm_away = False
        return None

    def _event_messages(self, new: list[dict[str, Any]]) -> list[bytes]:
        out: list[bytes] = []
        for ev in new:
            typ = _EVENT_TYPES.get(ev["kind"])
            if typ is not None:
                out.append(proto.event({"type": typ, "t": ev["t"], **{k: ev[k] for k in _EVENT_FIELDS if k in ev}}))
            lat = self._turns.on(ev)
            if lat is not None:
                out.append(proto.event({"t": ev["t"], **lat}))
        if len(self.session.timeline.frame_t) % 13 == 0:  # about once a second
            out.append(proto.event(self.stats()))
        return out

    def stats(self) -> dict[str, Any]:
        t = self.session.timeline
        late = np.asarray(t.frame_late_ms[-250:], float)
        return {"type": "stats", "t": round(self.session.clock.now(), 3), "frames": len(t.frame_t),
                "deadline_misses": self.misses, "late_p99_ms": round(float(np.percentile(late, 99)), 2) if len(late) else 0.0,
                "underruns": self.inbuf.underruns, "input_lag_ms": self.inbuf.lag_ms(),
                "underrun_frames": list(self.inbuf.underrun_takes),
                "skipped_s": round(self.inbuf.skipped_samples / SAMPLE_RATE, 3), "dropped_s": round(self.inbuf.dropped_samples / SAMPLE_RATE, 3)}
