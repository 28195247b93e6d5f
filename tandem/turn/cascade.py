"""The cascade baseline: final transcript -> LLM -> TTS, each step as early as it honestly can.

The LLM starts the moment the final transcript exists; each sentence goes to the TTS as soon as
it is complete. This is the latency a well-built cascade has on the same parts.
"""
from __future__ import annotations

import asyncio
import logging
import re

import numpy as np

from ..record import timeline as tl
from ..speak.markup import SpokenWords
from .backchannel import is_backchannel
from .machine import Action, Transition, TurnMachine
from .conversation import Conversation
from ..llm.client import LLMError, LLMUnavailable
from ..providers.base import OracleProvider, OracleRequest
from ..speak.tts import Voicer

log = logging.getLogger(__name__)

COULD_NOT_ANSWER = "Sorry, I could not get an answer from the language model."
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")


class SentenceChunker:
    """Accumulates streamed text; returns each sentence once it is complete, as said (speak/markup.py:
    a list number or bullet is not)."""

    def __init__(self) -> None:
        self._buf = ""
        self._words = SpokenWords()

    def push(self, delta: str) -> list[str]:
        self._buf += delta
        out = []
        while True:
            m = _SENTENCE_END.search(self._buf)
            if not m:
                break
            sent, self._buf = self._words.push(self._buf[: m.end()]), self._buf[m.end():]
            if sent:
                out.append(sent)
        return out

    def flush(self) -> list[str]:
        rest, self._buf = self._words.push(self._buf), ""
        held = self._words.flush()
        return [s for s in (rest, held) if s]


class CascadeResponder:
    def __init__(self, provider: OracleProvider, voicer: Voicer, conversation: Conversation,
                 timeline: tl.Timeline, max_tokens: int = 80, floor: TurnMachine | None = None) -> None:
        self.provider = provider  # the tandem's provider without its oracle-only parts: the same prompt
        self.voicer = voicer
        self.conv = conversation
        self.timeline = timeline
        self.max_tokens = max_tokens
        self._task: asyncio.Task | None = None
        self._ids = 0
        # the conversation's turn machine (the session's): talked over, it judges pause, then resume (a
        # backchannel) or drop (an interruption), and the responder takes the actions of its moves
        self.floor = floor if floor is not None else TurnMachine()
        self._heard = ""  # the user's turn as the Listener hears it now: what the judge reads
        self._barged = 0  # the reply (stream id) last stopped by barge-in: one stop per reply
        self.stats = {"starts": 0, "cancels": 0, "adoptions": 0, "errors": 0}

    @property
    def in_flight(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def _replying(self) -> bool:
        """A reply is under way (streaming, or not yet all played) and no barge-in has stopped it."""
        return self._barged != self._ids and (self.in_flight or self.voicer.busy)

    def _note(self, kind: str, **data) -> None:  # noqa: ANN003 - a provider's event, on the timeline
        self.timeline.add(kind, **data)

    def on_partial(self, text: str, paused: bool = False, said_more: bool = False) -> None:  # noqa: ARG002
        """`paused`: decoded as the user paused (the scheduler's early settle), `said_more`: the user went on
        past it (OracleScheduler.on_partial); the cascade waits for the final."""
        self.conv.on_partial(text)
        self.provider.observe(self.conv.asking(), False, self._note)
        self._heard = text

    def on_final(self, text: str) -> None:
        self.conv.on_final(text)
        self.provider.observe(self.conv.asking(), True, self._note)
        if not text.strip():
            return
        self._heard = text
        if self._replying and (is_backchannel(text) or self.floor.judge.keeps_reply(text)):
            # "Mm-hmm." over the reply is no new question: the reply goes on (the history keeps the
            # backchannel where it was said)
            self.timeline.add(tl.BACKCHANNEL_FINAL, stream=self._ids, text=text)
            return
        if self.floor.judging and self._replying:
            self._take(self.floor.interrupted("final", text))  # the voice paused for this turn: an interruption after all
        elif self.in_flight:
            self._task.cancel()
            self.stats["cancels"] += 1
            self.timeline.add(tl.LLM_CANCEL, stream=self._ids, reason="new user turn")
            self.voicer.clear()
        self.floor.judge.reset()
        self._ids += 1
        self.stats["starts"] += 1
        request = OracleRequest(turns=tuple(self.conv.turns), question=self.conv.current_user_text(),
                                asked=self.conv.standalone_question(), max_tokens=self.max_tokens, stream=self._ids)
        self.timeline.add(tl.LLM_START, stream=self._ids, provider=self.provider.name, **self.provider.describe(request))
        self._task = asyncio.get_running_loop().create_task(self._answer(self._ids, request))

    async def _answer(self, sid: int, request: OracleRequest) -> None:
        t0 = self.timeline.clock()
        chunker = SentenceChunker()
        text = ""
        try:
            async for delta in self.provider.answer(request, self._note):
                if not text:
                    self.timeline.add(tl.LLM_FIRST_TOKEN, stream=sid, ttft_s=round(self.timeline.clock() - t0, 4))
                    self.timeline.add(tl.LLM_ADOPT, stream=sid)
                    self.stats["adoptions"] += 1
                text += delta
                self.timeline.add(tl.LLM_CHUNK, stream=sid, text=delta)
                for sent in chunker.push(delta):
                    self._speak(sent)
            for sent in chunker.flush():
                self._speak(sent)
            self.timeline.add(tl.LLM_DONE, stream=sid, text=text)
            if not text.strip():
                raise LLMError("LLM returned an empty answer")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - LLMError, or any provider's failure: say so, go on
            self.stats["errors"] += 1
            error = str(e) if isinstance(e, LLMError) else f"{type(e).__name__}: {e}"
            away = isinstance(e, LLMUnavailable)  # an outage: the LLM's client logs it once (llm/outage.py)
            self.timeline.add(tl.LLM_ERROR, stream=sid, error=error, **({"unavailable": True} if away else {}))
            (log.debug if away else log.warning)("cascade could not answer: %s", error)
            for sent in chunker.flush():
                self._speak(sent)
            self._speak(COULD_NOT_ANSWER)

    def _speak(self, sentence: str) -> None:
        self.timeline.add(tl.TTS_START, text=sentence)
        self.voicer.say(sentence)

    def step(self, user_speaking: bool = False) -> tuple[np.ndarray, list[str]]:
        """The next frame of the reply. `user_speaking`: the user speaks in this frame
        (`frontend.speaking`, as the tandem's front-end hears it). Talked over, the reply is judged
        by the compact front-end's rule (tandem/turn/backchannel.py), so both modes meet a backchannel
        and an interruption on equal terms: the voice pauses at once; a backchannel (or a cough)
        resumes it and the LLM stream goes on; a real interruption drops the voice's queue and
        cancels the stream, and the user's next final starts a new answer as usual."""
        self._take(self.floor.talk_over(user_speaking, self._heard, self._replying))
        return self.voicer.pull()

    def _take(self, move: Transition | None) -> None:
        """The voice's part of a talk-over transition's actions."""
        if move is None:
            return
        d = move.decision
        if Action.YIELD in move.actions:
            self.voicer.pause()
            self.timeline.add(tl.VOICE_PAUSE, stream=self._ids, reason=d.reason, words=d.words)
        if Action.RESUME in move.actions:
            self.voicer.resume()
            self.timeline.add(tl.BACKCHANNEL, stream=self._ids, reason=d.reason, words=d.words,
                              speech_s=d.speech_s)
        if Action.DROP in move.actions:
            self._barge_in(d.reason, d.words)

    def _barge_in(self, reason: str, words: str = "") -> None:
        """A real interruption: cancel the stream, drop what the voice has not played (the segment
        under way is cut where it paused, so the history keeps only what was heard)."""
        self._barged = self._ids
        cancelled = self.in_flight
        if cancelled:
            self._task.cancel()
            self.stats["cancels"] += 1
            self.timeline.add(tl.LLM_CANCEL, stream=self._ids, reason="barge-in")
        cut = self.voicer.clear()
        self.timeline.add(tl.BARGE_IN, stream=self._ids, llm_cancelled=cancelled, reason=reason, words=words,
                          cut=cut.text if cut else None, heard=round(cut.heard, 3) if cut else None)

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
