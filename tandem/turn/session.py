"""One conversation: the 80 ms frame loop and the back-end around it.

The frame loop is the only code that touches front-end (or cascade playback) state. Back-end
work (the Listener process, LLM streams on the event loop, TTS on a thread) reaches it through
events: transcript events update the scheduler as they arrive; oracle events wait in a queue
that the loop drains before each frame within `event_budget_ms`. Nothing in the loop waits for
the LLM or the Listener.

Alignment: step k runs once input frame k has been fully heard, at session time (k+1) * 80 ms,
and its output is played during the next frame, so it lands in output frame k+1, as a live
duplex system would play it.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from ..record import timeline as tl
from ..audio.frames import AUDIBLE, FRAME_S, FRAME_SAMPLES
from .cascade import CascadeResponder
from ..runtime.children import Supervisor
from ..audio.clock import SessionClock
from .conversation import Conversation
from .heard import HeardPieces
from .machine import FINAL, OBSERVED, PARTIAL, UNRECORDED, Action, Transition, TurnMachine
from .reading import TurnReader
from ..runtime.errors import FrontEndUnavailable
from ..speak.frontend import FrontEnd, UserFrame, speaking
from ..record.metrics import TurnOnsets
from ..listener.frame_vad import FrameVoiceMeter
from ..listener.process import ListenerProcess
from ..llm.client import ChatClient
from ..think.oracle import OraclePolicy, OracleStream, WordBuffer
from ..runtime.realtime import StepWatch
from ..providers import for_cascade, for_oracles
from .scheduler import OracleScheduler
from .session_config import MODES, LiveStep, SessionConfig  # noqa: F401 - importable from here
from ..speak.tts import Voicer

if TYPE_CHECKING:
    from ..knowledge.base import KnowledgeBase

log = logging.getLogger(__name__)


class Session:
    def __init__(self, config: SessionConfig, listener: ListenerProcess, client: ChatClient | None,
                 voicer: Voicer | None = None, front_end: FrontEnd | None = None,
                 oracle_policy: OraclePolicy | None = None, meta: dict[str, Any] | None = None,
                 supervisor: Supervisor | None = None, knowledge: "KnowledgeBase | None" = None) -> None:
        if config.mode not in MODES:
            raise ValueError(f"unknown mode {config.mode!r}; choose from {', '.join(MODES)}")
        if config.mode in ("tandem", "frontend") and front_end is None:
            raise FrontEndUnavailable(f"--mode {config.mode} needs a front-end, and none is configured")
        if config.mode == "cascade" and voicer is None:
            raise ValueError("cascade mode needs a TTS voicer")
        self.config = config
        self.sid = uuid.uuid4().hex[:12]
        self.clock = SessionClock()
        self.timeline = tl.Timeline(self.clock.now, meta={"mode": config.mode, "pace": config.pace, **(meta or {})})
        self.turns = TurnMachine(takers=[self._took_turn])  # the turn state (turn/machine.py)
        self.conv = Conversation(standalone=config.scheduler.standalone)
        self.reader = TurnReader.of_session(self.turns, config, client, lambda: not speaking(self.vad_prob),
                                            lambda text, p: self.timeline.add(tl.TURN_END_JUDGED, text=text, p_end=p),
                                            self.conv.told_since_reply)
        self.timeline.observer = self._follow_turn
        if knowledge is not None:
            self.timeline.meta["knowledge"] = {"root": str(knowledge.index.root), "passages": knowledge.passages}
        self.listener, self.client, self.voicer = listener, client, voicer
        if voicer is not None:
            voicer.on_ready = lambda text, ms: self.timeline.add(tl.TTS_AUDIO, text=text, synth_ms=round(ms, 1))
        self.front_end = front_end
        if hasattr(front_end, "follow_turns"):  # a front-end that judges talk-over does it with this machine
            front_end.follow_turns(self.turns)
        self._oracle_events: deque[tuple[str, str]] = deque()
        self.oracle_events_dropped = 0
        self.oracle_settled = False  # the oracle answers the turn's final transcript (OracleScheduler.settled)
        self._oracle_words = WordBuffer()
        self.oracle: OracleStream | None = None
        self.scheduler: OracleScheduler | None = None
        self.cascade: CascadeResponder | None = None
        if config.mode == "tandem":
            tok = front_end.tokenizer
            self.oracle = OracleStream(tok.start_id, tok.pad_id, oracle_policy)
            self.timeline.meta.update(oracle_policy=self.oracle.policy.name, oracle_pad=tok.pad_id)
            if client is not None:
                provider = for_oracles(client, knowledge, config.scheduler.prompt_form, config.extractive)
                self.scheduler = OracleScheduler(provider, self.conv, self.timeline, self._emit_oracle, config.scheduler)
                self.scheduler.talking = self._assistant_talking
                self.scheduler.floor_kept = self.turns.judge.keeps_reply
                if hasattr(client, "load"):  # an LLM shared by a server's sessions (server.shared.SharedLLM)
                    self.scheduler.llm_load = client.load
                    self.scheduler.llm_slots = client.concurrency
                    self.scheduler.ttfts = client.ttfts
        elif config.mode == "cascade":
            if client is None:
                raise ValueError("cascade mode needs an LLM client")
            provider = for_cascade(client, knowledge, config.scheduler.prompt_form)
            self.cascade = CascadeResponder(provider, voicer, self.conv, self.timeline, config.cascade_max_tokens,
                                            floor=self.turns)
        self.meter = FrameVoiceMeter() if config.frame_vad else None
        self._steps = StepWatch()
        self.vad_prob = 0.0  # Listener state as last reported (on the event loop); vad_prob `meter`'s if any
        self.in_speech = False
        self.listener_busy = False
        self.heard_s = 0.0
        self._heard = asyncio.Event()
        self._listener_stalled = False
        self._user_text = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._silent_frames = 10**9  # frames since the assistant was last audible
        self._onsets = TurnOnsets()
        self._heard_pieces = HeardPieces(self.conv)
        self._next_k = 0  # the next step
        self.supervisor = supervisor
        self._unsubscribe: Any = None

    # -- back-end plumbing ------------------------------------------------------------------
    # an answer streams as a few dozen events, drained every frame; this many waiting means the
    # frame loop has not drained for seconds: newer events are dropped (and counted) rather than kept
    MAX_ORACLE_EVENTS = 1024

    def _follow_turn(self, ev: dict[str, Any]) -> None:
        if ev["kind"] in OBSERVED:
            self.turns.on(ev["kind"], ev["t"])

    def _took_turn(self, step: Transition) -> None:
        """Every move of the turn machine on the timeline, with the events no one else records; a drop restarts the oracle."""
        d = step.decision
        if (d is not None and self.cascade is None) or step.event in UNRECORDED:
            detail = {} if d is None else {"reason": d.reason, "words": d.words, "speech_s": d.speech_s}
            self.timeline.add(step.event, t=step.t, **detail)
        self.timeline.add(tl.TURN, t=step.t, **step.as_event())
        if Action.DROP in step.actions and self.scheduler is not None:
            self.scheduler.reply_dropped(by_words=step.decision is not None and step.decision.by_words)

    def _emit_oracle(self, kind: str, text: str) -> None:
        if len(self._oracle_events) >= self.MAX_ORACLE_EVENTS:
            self.oracle_events_dropped += 1
            if self.oracle_events_dropped == 1:
                log.warning("session %s: %d oracle events waiting; newer ones are dropped", self.sid, self.MAX_ORACLE_EVENTS)
            return
        self._oracle_events.append((kind, text))

    def _on_loop(self, fn: Any, *args: Any) -> None:
        """`fn(*args)` on the session's event loop, from another thread (the Listener's reader, the supervisor)."""
        if (loop := self._loop) is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:
                pass  # the loop closed between the check and the call

    def _on_listener_thread(self, msg: dict[str, Any]) -> None:
        self._on_loop(self._on_listener, msg)

    def _on_fault_thread(self, event: dict[str, Any]) -> None:
        """A back-end process died or came back (from the supervisor's thread): on the timeline."""
        self._on_loop(lambda: self.timeline.add(tl.FAULT, **event))

    def _on_listener(self, msg: dict[str, Any]) -> None:
        """A Listener message, on the event loop: a fault goes on the timeline (the client's `error`), not unseen."""
        try:
            self._handle_listener(msg)
        except Exception as e:  # noqa: BLE001 - a fault in one message's handling must not pass unseen
            log.exception("session %s: handling the Listener's %r failed", self.sid, msg.get("kind"))
            self.timeline.add(tl.ERROR, source="session",
                              error=f"internal error handling the Listener's {msg.get('kind')}: {type(e).__name__}: {e}")

    def _handle_listener(self, msg: dict[str, Any]) -> None:
        kind = msg.get("kind")
        if kind == "progress":
            if self.meter is None:
                self.vad_prob = float(msg.get("vad_prob", 0.0))
            self.in_speech = bool(msg.get("in_speech"))
            self.listener_busy = bool(msg.get("busy"))
            self.heard_s = float(msg.get("audio_s", 0.0))
            self._heard.set()
            return
        data = {k: v for k, v in msg.items() if k not in ("sid", "kind")}
        if kind == "vad_start":
            self.timeline.add(tl.VAD_START, **data)
            self._onsets.speech_start()
        elif kind == "vad_end":
            self.timeline.add(tl.VAD_END, **data)
            self._record_onset(self._onsets.speech_end(float(msg["audio_s"])))
        elif kind in ("partial", "final"):
            now = self.clock.now()
            data["stale_s"] = round(now - float(msg["audio_s"]), 4)
            if "sent_t" in data:  # from the Listener's emit to here: its queue, this process's reader and event loop
                data["transit_s"] = round(time.time() - float(data.pop("sent_t")), 4)
            self.timeline.add(tl.PARTIAL if kind == "partial" else tl.FINAL, t=now, **data)
            text = msg.get("text", "")
            move = self.turns.on(PARTIAL if kind == "partial" else FINAL, now)
            # the back-end is asked where the turn's row says so; else (or with none) the transcript is only heard
            asked = move is not None and Action.ASK in move.actions
            backend = (self.scheduler or self.cascade) if asked else None
            if kind == "partial":
                self._user_text = text
                if backend is not None:
                    backend.on_partial(text, paused=bool(msg.get("paused")), said_more=bool(msg.get("said_more")))
                else:
                    self.conv.on_partial(text)
            else:
                if text.strip():
                    self._user_text = text  # the front-end sees the final's corrections as a revision
                if backend is not None:
                    backend.on_final(text)
                else:
                    self.conv.on_final(text)
                if text.strip():
                    self.listener.set_context(self.sid, self.conv.user_said())
            self.reader.read(text, final=kind == "final", paused=bool(msg.get("paused")),
                             said_more=bool(msg.get("said_more")), t=now)
        elif kind in ("error", "fatal"):
            self.timeline.add(tl.ERROR, source="listener", error=msg.get("error"))
            log.error("Listener: %s", msg.get("error"))

    def _drain_oracle_events(self, frame: int) -> None:
        if self.oracle is None:
            self._oracle_events.clear()
            return
        budget_end = time.perf_counter() + self.config.event_budget_ms / 1e3
        while self._oracle_events and time.perf_counter() < budget_end:
            kind, text = self._oracle_events.popleft()
            if kind == "settled":
                self.oracle_settled = bool(text)
                self.timeline.add(tl.ORACLE_SETTLED, settled=self.oracle_settled)
                continue
            if kind in ("reset", "restart"):
                self.oracle.reset(frame, fresh=kind == "restart")
                self._oracle_words.reset()
                self.timeline.add(tl.ORACLE_RESET, **({"fresh": True} if kind == "restart" else {}))
                continue
            words = self._oracle_words.push(text) if kind == "append" else self._oracle_words.flush()
            if words:
                ids = self.front_end.tokenizer.encode(words)
                self.oracle.append(ids, frame)
                self.timeline.add(tl.ORACLE_APPEND, text=words, tokens=ids)
            if kind == "end":  # after its last words: a newer answer that ends sooner cuts the old tail
                self.oracle.end(frame)
                self.timeline.add(tl.ORACLE_END)

    @property
    def _voice(self) -> Voicer | None:
        """The voice the user hears: the cascade's Voicer, or the front-end's."""
        return self.voicer if self.voicer is not None else getattr(self.front_end, "voicer", None)

    def _assistant_talking(self) -> bool:
        voicer = getattr(self.front_end, "voicer", None)
        return bool(voicer is not None and voicer.busy)

    def backend_idle(self) -> bool:
        busy = self.in_speech or self.listener_busy
        busy |= bool(self.scheduler and self.scheduler.in_flight) or bool(self.cascade and self.cascade.in_flight)
        busy |= bool(self.voicer and self.voicer.synthesizing)
        fe_voicer = getattr(self.front_end, "voicer", None)
        busy |= bool(fe_voicer is not None and fe_voicer.synthesizing)
        return not busy

    # -- the frame loop ----------------------------------------------------------------------
    def _user_frame(self, audio: np.ndarray, k: int) -> UserFrame:
        """After `_oracle_token(k)`: what the front-end is given at frame k besides the oracle token."""
        settled = self.oracle_settled and self.oracle is not None
        return UserFrame(audio=audio, vad_prob=self.vad_prob, in_speech=self.in_speech, transcript=self._user_text,
                         oracle_settled=settled, oracle_upcoming=self.oracle.upcoming(k) if settled else None)

    def _oracle_token(self, k: int) -> int:
        """The oracle token the front-end gets at frame k (PAD in front-end-only mode)."""
        return self.oracle.token(k) if self.oracle is not None else self.front_end.tokenizer.pad_id

    async def _wait_heard(self, upto_s: float) -> None:
        if self._listener_stalled:
            return
        deadline = time.perf_counter() + 2.0
        while self.heard_s < upto_s:
            if time.perf_counter() > deadline:  # a Listener that stopped answering must not hang the run
                self._listener_stalled = True
                self.timeline.add(tl.ERROR, source="listener", error="Listener stopped acknowledging audio; "
                                  "fast pace falls back to real time")
                return
            self._heard.clear()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (Ctrl-C)
                # that lands as the event fires, and the run would then go on as if never interrupted
                async with asyncio.timeout(0.05):
                    await self._heard.wait()
            except TimeoutError:
                pass

    def _begin(self) -> None:
        """Open this session's back-end: a Listener stream, the oracle scheduler, a fresh front-end."""
        self._loop = asyncio.get_running_loop()
        if self.supervisor is not None:
            self._unsubscribe = self.supervisor.subscribe(self._on_fault_thread)
        self.listener.open(self.sid, self._on_listener_thread)
        if self.scheduler is not None:
            self.scheduler.start()
        if self.front_end is not None:
            self.front_end.reset()
        self._silent_frames = 10**9
        self._onsets = TurnOnsets()
        self._next_k = 0
        self._steps.begin()

    def _pre_step(self, k: int, frame: np.ndarray) -> tuple[float, float]:
        """Start step k: hand the frame to the Listener and drain oracle events. Returns (t0, p0)."""
        t0 = self.clock.now()
        p0 = time.perf_counter()
        self._steps.started()
        self.timeline.current_frame = k
        self.turns.frame_t = (k + 2) * FRAME_S  # this step's output plays in the next frame
        self.listener.feed(self.sid, frame)
        if self.meter is not None:
            self.vad_prob = self.meter.feed(frame)
        self._drain_oracle_events(k)
        return t0, p0

    def _post_step(self, k: int, audio: np.ndarray, texts: list[str], otok: int, t0: float, p0: float) -> None:
        """Record step k's output on the timeline (text pieces, speech onsets, frame health)."""
        deadline = (k + 1) * FRAME_S
        self._heard_pieces.update(self._voice, self.timeline, deadline + FRAME_S)
        for text in texts:
            self.timeline.add(tl.ASSISTANT_TEXT, t=deadline + FRAME_S, text=text)
            self.conv.on_assistant(text)
        if float(np.max(np.abs(audio))) > AUDIBLE:
            if self._silent_frames >= 6:  # a new stretch of assistant speech after >= 0.5 s of silence
                self.timeline.add(tl.ASSISTANT_AUDIO_START, t=deadline + FRAME_S, out_frame=k + 1)
            self._silent_frames = 0
            self._record_onset(self._onsets.audible(deadline + FRAME_S))
        else:
            self._silent_frames += 1
            if self._silent_frames == 6:  # the end of a stretch of speech, where a new one would start
                self.timeline.add(tl.ASSISTANT_AUDIO_END, t=deadline + FRAME_S - 5 * FRAME_S)
        p1 = time.perf_counter()
        step_ms = (p1 - p0) * 1e3
        late_ms = (t0 - deadline) * 1e3
        self.timeline.add_frame(t0, late_ms, step_ms, otok, " ".join(texts), self.vad_prob)
        self._steps.ended(self.timeline, k, late_ms, step_ms, p0, p1)

    def _record_onset(self, found: tuple[float, float] | None) -> None:
        if found is not None:
            self.timeline.add(tl.TURN_ONSET, speech_end_s=round(found[0], 3), onset_s=round(found[1], 3))

    # a reply is over once the assistant has been silent this long with nothing left in flight
    REPLY_OVER_FRAMES = 15  # 1.2 s: longer than the pauses inside a reply

    def reply_over(self) -> bool:
        """The assistant is silent and has nothing more to say: no audio for REPLY_OVER_FRAMES, its
        voice idle, and nothing in flight in the back-end (so no oracle that could still be read)."""
        voicer = self._voice
        return (self._silent_frames >= self.REPLY_OVER_FRAMES and self.backend_idle()
                and not (voicer is not None and voicer.busy))

    async def run(self, frames: np.ndarray, finish_reply_s: float = 0.0) -> np.ndarray:
        """Feed [n, 1920] user frames on the session clock; return the assistant's aligned audio.
        With `finish_reply_s`, silence goes on being fed after the input for at most that long, until
        the reply under way is over (`reply_over`): the audio returned is then longer than the input.
        A ticker of one session: the same steps as the server's ticker, with this session's
        front-end stepped alone."""
        n = len(frames)
        extra = int(round(finish_reply_s / FRAME_S))
        out = np.zeros((n + extra + 1, FRAME_SAMPLES), dtype=np.float32)
        silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
        self._begin()
        # time 0 is the first frame's start, as a live session's is its first tick: building the
        # session (a Silero instance, when the pool has none spare) is not its frames' lateness
        self.clock.start_at(time.perf_counter())
        fast = self.config.pace == "fast"
        k = 0
        try:
            for k in range(n + extra):
                if k >= n and self.reply_over():
                    k -= 1
                    break
                deadline = (k + 1) * FRAME_S
                if fast:
                    await self._wait_heard(k * FRAME_S - 0.05)
                    if self.backend_idle() and not self._listener_stalled:
                        self.clock.skip_to(deadline)
                await self.clock.sleep_until(deadline)
                st = self.live_pre(frames[k] if k < n else silence)
                if st.audio is None:
                    res = self.front_end.step(st.user, st.oracle_token)
                    st.audio, st.texts = res.audio, list(res.text)
                out[k + 1] = st.audio
                self.live_post(st, st.audio, st.texts)
                await asyncio.sleep(0)  # let back-end callbacks run even when the loop is behind
        finally:
            await self.close()
        if extra and k + 1 >= n:
            self.timeline.meta["finished_reply_s"] = round((k + 1 - n) * FRAME_S, 2)
        return out[: max(n, k + 1) + 1].reshape(-1)

    # -- a step in two halves (the server's ticker, and `run` as a ticker of one session) --------
    # A session does not own the front-end step: one ticker steps every live session of a server
    # together, so front-end steps can be batched across sessions. The ticker calls `live_pre`
    # with the frame the client sent in time (silence if it sent nothing), steps the front-end
    # itself (batched) unless `live_pre` already produced the output (cascade mode), then calls
    # `live_post`. A live session's clock is aligned to the ticker so that step k runs at session
    # time (k + 1) * 80 ms, exactly as in `run`, and lateness means the same thing.
    def start_live(self, t0: float) -> None:
        """Begin live input; `t0` is the `time.perf_counter()` instant that is session time 0."""
        self.clock.start_at(t0)  # the session clock follows the server's ticker
        self.timeline.meta["pace"] = "live"
        self._begin()

    def live_pre(self, frame: np.ndarray) -> LiveStep:
        """First half of the next live step. `step.audio` is set when the output is already known
        (cascade mode); otherwise step the front-end with `step.user` and `step.oracle_token`."""
        k = self._next_k
        t0, p0 = self._pre_step(k, frame)
        if self.cascade is not None:
            audio, texts = self.cascade.step(self.in_speech and speaking(self.vad_prob))
            return LiveStep(k, t0, p0, -1, None, audio, texts)
        oracle_token = self._oracle_token(k)
        return LiveStep(k, t0, p0, oracle_token, self._user_frame(frame, k))

    def live_post(self, step: LiveStep, audio: np.ndarray, texts: list[str]) -> None:
        """Second half: record the step's output. The caller plays `audio` in the next frame."""
        self._post_step(step.k, audio, texts, step.oracle_token, step.t0, step.p0)
        self._next_k = step.k + 1

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.listener.close(self.sid)
        if self.meter is not None:
            self.meter.close()
        await self.reader.aclose()
        if self.scheduler is not None:
            await self.scheduler.aclose()
        if self.cascade is not None:
            await self.cascade.aclose()
        stats = (self.scheduler or self.cascade).stats if (self.scheduler or self.cascade) else {}
        self.timeline.meta["llm_stats"] = dict(stats)
        if self.oracle is not None:
            self.timeline.meta["oracle_tokens_fed"] = int(sum(1 for t in self.timeline.frame_oracle
                                                              if t not in (-1, self.oracle.pad_token)))
            buf = self.oracle.buf
            self.timeline.meta["oracle_policy_stats"] = {"dropped": buf.dropped, "kept": buf.kept,
                                                         "restarts": buf.restarts}
            if self.oracle_events_dropped:
                self.timeline.meta["oracle_events_dropped"] = self.oracle_events_dropped
