"""When to ask the LLM, and how its streamed answers become oracle events (KAME back-end policy).

Every `check_interval_s`, at once on each partial (`check_on_partial`) and on a final transcript, a
stream is started when the user's word count grew by `min_new_words` since the last start or a final
arrived, at most `max_starts` per `window_s`. A final whose words are the ones the last stream was
started from keeps that stream (`keep_on_same_final`): restarting would throw away the head start
the partial gave, and let a second answer, prompted with what the assistant already began to say,
replace a right one. Beyond KAME, a revised transcript with no new words ("capital of
Austria" heard again as "capital of Australia") also starts one (`restart_on_revision`): counting
words alone would keep the oracle answering the question the Listener first misheard; a partial
that only loses its last words (Whisper taking a word back) is not a revision. Words are counted
over the whole conversation, so a follow-up turn ("and Germany?") counts its own words. With
`max_concurrent == 1` a new stream cancels the one it replaces; with more, streams run side by side
and the newest one to emit text is adopted, the older ones cancelled. The adopted stream's first
chunk emits `reset`, each chunk `append`. A stream started once the reply is under way (tandem mode
often speaks before the final transcript exists) is asked the user's turn without the reply's first
words, as the cascade asks it, and goes on from the restated opening the reply began with: an answer
that agrees with the one being spoken then continues it, without a restart. Where the reply said other
words of its own (a partial's answer's "The"), the stream goes on from those (`continue_said`).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import statistics
from collections import deque
from contextlib import aclosing
from typing import Callable

from ..record import timeline as tl
from .backchannel import is_backchannel
from .conversation import Conversation
from ..llm.repeat_guard import RepeatGuard, earlier_replies
from ..llm.role_guard import RoleEchoGuard
from ..llm.client import LLMError, LLMUnavailable
from ..providers.base import OracleProvider, OracleRequest
from ..think.restate import Splicer, goes_on_from, restate, still_fits
from .feeding import OracleFeed
from .streams import (LLMStream, OracleEmit, SchedulerConfig, ends_sentence, normalized, reads_whole,  # noqa: F401 - importable from here
                      whole_words)

log = logging.getLogger(__name__)


class OracleScheduler(OracleFeed):
    """Starts, keeps and cancels the LLM streams of one conversation (see the module's docstring); how an
    adopted stream's text becomes oracle events is `OracleFeed`'s."""

    def __init__(self, provider: OracleProvider, conversation: Conversation, timeline: tl.Timeline,
                 emit: OracleEmit, config: SchedulerConfig = SchedulerConfig()) -> None:
        self.provider = provider
        self.conv = conversation
        self.timeline = timeline
        self.emit = emit
        self.config = config
        self._ids = itertools.count(1)
        self._live: dict[int, LLMStream] = {}
        self._adopted: int | None = None
        self._starts: deque[float] = deque()
        self._words_at_start = 0
        self._text_at_start = ""
        self._asked_at_start = ""
        self._final_pending = False
        self._pause_final = False  # the pending final is a paused partial's (`settle_on_pause`)
        self._said_more = False  # the user went on past the last partial (`on_partial`)
        # the adopted stream answers the turn's final transcript (kept, or started on it): no newer transcript
        # of this turn will replace its oracle. Sent to the session as an oracle event, in order with the resets
        self.settled = False
        self._last: LLMStream | None = None  # the stream started last
        self._opening: str | None = None  # the restated opening of the current turn's reply
        self._prefill = ""  # the same opening in full, which an LLM that continues a reply goes on from
        # the LLM's time to first token, the last streams; a server's sessions share one (set by the session):
        # a session's first turn then knows how soon the LLM answers now, where its own history knew nothing
        # and said the subject in full ("The play Romeo and Juliet was written by" where "It was written by"
        # would have ended as the answer came)
        self.ttfts: deque[float] = deque(maxlen=5)
        self._ticker: asyncio.Task | None = None
        self._held = ""  # the oracle's text as the session holds it, since the last reset
        self._held_ended = False
        # what is held answers an earlier turn, or the reply reading it was dropped by an interruption: the next
        # stream resets it (a front-end whose reply was dropped waits for a fresh answer, `reply_dropped`)
        self._held_stale = False
        self._restart_due = False  # the next reset feeds the start token again whatever the policy keeps (`reply_dropped`)
        self._refeed_when_settled = False  # a reply dropped by the turn's own words waits for its answer to settle
        self.talking: Callable[[], bool] = lambda: False  # the assistant's voice is busy (set by the session)
        # the user's words over the voice leave the reply going (set by the session: BargeInJudge.keeps_reply)
        self.floor_kept: Callable[[str], bool] = lambda text: False
        # requests in flight or queued at the LLM, every session's, and how many it serves at once (set by
        # the session when its client is shared: `server.shared.SharedLLM`)
        self.llm_load: Callable[[], int] = lambda: 0
        self.llm_slots = 1
        self.stats = {"starts": 0, "cancels": 0, "adoptions": 0, "errors": 0, "rate_limited": 0, "kept": 0,
                      "backchannels": 0, "deferred": 0}

    # -- transcript events (called on the event loop) ----------------------------------------
    def _note_turn(self, text: str) -> None:
        """Before the Conversation hears `text`: text with no turn being heard begins a new user turn,
        and the last reply's opening is not this one's."""
        if text.strip() and not self.conv.hearing:
            self._drop_opening()
            self._held_stale = True
            self._refeed_when_settled = False  # a new turn: its own stream brings its answer

    def reply_dropped(self, by_words: bool = False) -> None:
        """The user interrupted the reply and the front-end dropped it: the oracle held is no longer being
        read, so the next stream restarts it, start token and all, even where it says the same words (a
        "restart": the oracle policy feeds its start token again, `OracleStream.reset(fresh=True)`). Adopted
        quietly, or reset under the prefix policy, which goes on with an oracle that repeats the one fed,
        it fed nothing new, and a front-end hushed by the interruption heard no answer to take its turn
        with: a question the user went on with after a pause ("Who wrote the player?" ... "Romeo and
        Juliet?") was answered 2.1 s after its end, or not at all.

        `by_words`: the user's words dropped it. Where they are this turn's own (no new turn began) and the
        oracle already answers the turn's final, the front-end began its reply while the user still asked,
        and no newer stream will come: the answer held is fed afresh at once, for the hushed front-end to say
        once the user stops (in a loadtest the final's words dropped "It was" and the turn got nothing)."""
        # not settled yet, the final may keep the stream held (the same words), and with no newer stream the
        # hushed front-end would wait for ever ("It" said in a pause inside "...Romeo and [pause] Juliet?",
        # dropped by "Juliet", and the turn got nothing): fed again once it settles, unless a stream resets first
        self._refeed_when_settled = by_words and not self._held_stale and bool(self._held.strip())
        self._held_stale = True
        self._restart_due = True
        self._refeed_if_settled()

    def _refeed_if_settled(self) -> None:
        """The held answer fed again, from its start token, once it answers the final (`reply_dropped`)."""
        if not (self.settled and self._refeed_when_settled):
            return
        self._refeed_when_settled = False
        held, ended = self._held, self._held_ended
        self._send("reset")  # a restart: `_restart_due`
        self._send("append", held)
        if ended:
            self._send("end")
        self.timeline.add(tl.LLM_KEEP, stream=self._adopted, reason="answer fed again after the reply was dropped")

    def on_partial(self, text: str, paused: bool = False, said_more: bool = False) -> None:
        """`paused`: the Listener decoded it as the user paused, all their voiced audio so far. `said_more`:
        the user's voice went on past its audio, so its closing punctuation is where the audio was cut
        ("What is the capital?" of "...capital of France?"), and it completes no question."""
        self._note_turn(text)
        self.conv.on_partial(text)
        self.provider.observe(self.conv.asking(), False, self._note)
        self._said_more = said_more and self.config.cut_ends_no_question
        if paused and not self._said_more and self.config.settle_on_pause and not self.talking() and self._turn_reads_whole():
            self._final_pending = self._pause_final = True
            self.check()
            return
        if self._pause_final:  # the user went on after the pause: what they paused on is no final
            self._final_pending = self._pause_final = False
        if self.config.check_on_partial:
            self.check()

    def _turn_reads_whole(self) -> bool:
        """The user's turn as heard ends as a whole sentence (`reads_whole`)."""
        return reads_whole(self.conv.current_user_text())

    def on_final(self, text: str) -> None:
        self._pause_final = self._said_more = False
        self._note_turn(text)  # a turn heard only as its final
        self.conv.on_final(text)
        self.provider.observe(self.conv.asking(), True, self._note)
        if text.strip():
            self._final_pending = True
            self.check()

    @property
    def in_flight(self) -> bool:
        return bool(self._live)

    # -- policy -------------------------------------------------------------------------------
    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        failing = ""  # the last check's error, reported once until a check succeeds or the error changes
        while True:
            await asyncio.sleep(self.config.check_interval_s)
            try:
                self.check()
                failing = ""
            except Exception as e:  # noqa: BLE001 - a dead ticker would leave every later turn unanswered, unseen
                error = f"{type(e).__name__}: {e}"
                if error != failing:
                    failing = error
                    log.exception("scheduler check failed")
                    self.timeline.add(tl.ERROR, source="scheduler", error=f"internal error in the scheduler: {error}")

    def _all_user_text(self) -> str:
        """Everything the user has said in this conversation: its finals, then the live partial.
        Counting the current turn alone would count a follow-up ("and Germany?", 2 words) against the
        last question's total, and count the same partial again once the assistant speaks over it."""
        return " ".join([t for role, t in self.conv.turns if role == "user"] + [self.conv.partial])

    def check(self) -> None:
        text = normalized(self._all_user_text())
        now_words = text.split()
        words = len(now_words)
        grew = words - self._words_at_start >= self.config.min_new_words
        before = self._text_at_start.split()
        shared = min(words, len(before))  # only words heard both times: a dropped last word is no revision
        turn_words = len(normalized(self.conv.current_user_text()).split())
        revised = (self.config.restart_on_revision and turn_words >= self.config.min_words_for_revision
                   and now_words[:shared] != before[:shared])
        complete = self._completes_question(text)
        if not (self._final_pending or grew or revised or complete):
            return
        if not (self._final_pending or complete) and self._llm_busy():
            self.stats["deferred"] += 1  # the words still count: the next check may start on them
            return
        # a follow-up fragment counts as the question it stands for ("And Spain?": "What is the capital of Spain?"),
        # and a lead-in counts for nothing: "Sorry to cut" asks nothing yet (SmolLM2 answered it "I'm sorry to
        # cut it, but I'll keep going.", and the front-end began to say so in the user's next pause)
        asked_words = whole_words(self.conv.standalone_question() or self.conv.current_user_text())
        if not self._final_pending and asked_words < self.config.min_turn_words:
            return
        current = self.conv.current_user_text()
        if self.talking() and (is_backchannel(current) or self.floor_kept(current)):
            if self._final_pending:
                self.stats["backchannels"] += 1
                self.timeline.add(tl.LLM_KEEP, stream=self._last.sid if self._last else None,
                                  reason="backchannel while the assistant talks")
            self._final_pending = False
            self._words_at_start, self._text_at_start = words, text  # its words start nothing later either
            return
        last = self._last
        if (self._final_pending and not (grew or revised) and self.config.keep_on_same_final
                and text == self._text_at_start and last is not None and last.usable):
            self._final_pending = False
            self.stats["kept"] += 1
            self.timeline.add(tl.LLM_KEEP, stream=last.sid, reason="paused partial as heard when it started"
                              if self._pause_final else "final as heard when it started")
            last.final = True  # it answers the final now: a quiet adoption's later append keeps the oracle settled
            self._settle(last.sid == self._adopted and self._stands(last))
            return
        now = self.timeline.clock()
        while self._starts and now - self._starts[0] > self.config.window_s:
            self._starts.popleft()
        # a growing partial's start is capped, not the question whole or its final: in a slow LLM's run five starts
        # on "What is the cap?" ... "...of Austria?" used the window, and "...of Australia?" waited for its final
        if len(self._starts) >= self.config.max_starts and not (self._final_pending or complete):
            self.stats["rate_limited"] += 1
            return
        self._starts.append(now)
        final, self._final_pending = self._final_pending, False
        self._words_at_start = words
        self._text_at_start = text
        self._asked_at_start = self.conv.standalone_question()
        self._launch(final)

    def _drop_opening(self) -> None:
        self._opening, self._prefill = None, ""

    def _continues_replies(self) -> bool:
        """The provider's LLM goes on from a reply begun for it (LLMConfig.prefill)."""
        return bool(getattr(self.provider, "continues_replies", False))

    def _llm_answers_soon(self) -> bool:
        """The LLM's last replies began within `short_opening_ttft_s` (not known before the first)."""
        return bool(self.ttfts) and statistics.median(self.ttfts) < self.config.short_opening_ttft_s

    def _llm_busy(self) -> bool:
        """Other sessions' requests fill every slot of the shared LLM (this session's own stream would be
        cancelled by the new one, so it does not count)."""
        return self.config.defer_when_busy and self.llm_load() - len(self._live) >= self.llm_slots

    def _completes_question(self, text: str) -> bool:
        """The turn now reads as a whole question that no stream was started on. KAME counts new words
        (two at least), but the word that completes a question is often one: "...the capital of Aust."
        becomes "...the capital of Australia." and waited for the final (0.4-0.8 s later); Whisper's
        closing punctuation, or a follow-up fragment that now stands for a whole question, says the
        question is complete."""
        if not self.config.start_on_complete or text == self._text_at_start:
            return False
        turn = self.conv.current_user_text().rstrip()
        if ends_sentence(turn) and not self._said_more:
            return True
        asked = self.conv.standalone_question()
        return bool(asked) and asked != self._asked_at_start

    def _settle(self, settled: bool) -> None:
        if settled != self.settled:
            self.settled = settled
            self.emit("settled", "1" if settled else "")
        self._refeed_if_settled()

    def _launch(self, final: bool = False) -> None:
        cfg = self.config
        if len(self._live) >= cfg.max_concurrent:
            for sid in sorted(self._live)[: len(self._live) - cfg.max_concurrent + 1]:
                self._cancel(sid, "superseded")
        st = LLMStream(next(self._ids), started_t=self.timeline.clock(), final=final)
        question = self.conv.current_user_text()
        asked = self.conv.standalone_question()
        # tandem mode often speaks before the final exists. (A reply begun in a pause, with the user
        # going on, is not one: the voice yields to the user, and the next reply opens afresh.)
        replying = self.conv.reply_under_way() and not self.conv.hearing
        standalone = asked or question
        # once the reply has begun, a fresh opening would have the front-end say its first words again;
        # the reply goes on from the opening it began with, so a stream that agrees continues it
        if not replying:
            opening = restate(standalone, short=self._llm_answers_soon(),
                              short_words=cfg.short_opening_words) if cfg.restate else None
            if opening:
                self._opening, self._prefill = opening, restate(standalone) or opening
            elif not (self._opening and self._continues_replies() and still_fits(self._opening, standalone)):
                self._drop_opening()
            # else a partial cut off mid-phrase ("...Romeo and just...") keeps the opening the front-end may
            # already be saying: an LLM that goes on from it agrees with it, where one asked afresh replied
            # "The play Romeo and Juliet by William Shakespeare is written by..." and the reply was taken back
        elif self._opening and not still_fits(self._opening, standalone):
            self._drop_opening()  # the question changed under the opening: the reply repairs it
        if self._prefill and not still_fits(self._prefill, standalone):
            self._refit_prefill(standalone)
        # words the voice says now, or has said of the reply to the turn's final (a reply the user went on past
        # in a pause is dropped, and the next one opens afresh)
        said = self.conv.reply_said() if cfg.continue_said and (replying or self.talking()) else ""
        goes_on = bool(said) and self._go_on_from(said, standalone)
        # the LLM goes on from the opening in full, whichever the front-end says ("It is" names no subject)
        request = OracleRequest(turns=tuple(self.conv.without_reply_under_way()), partial=self.conv.partial,
                                question=question, asked=asked, opening=self._prefill, max_tokens=cfg.max_tokens,
                                stream=st.sid)
        self._live[st.sid] = st
        self._last = st
        self.stats["starts"] += 1
        self.timeline.add(tl.LLM_START, stream=st.sid, provider=self.provider.name, **self.provider.describe(request))
        opening = self._opening
        if opening:
            st.splicer = Splicer(opening, request.standalone)
            self.timeline.add(tl.RESTATE, stream=st.sid, text=opening, **({"reused": True} if replying else {}),
                              **({"said": said} if goes_on else {}))
            # whole words, so it goes on with a space: the session feeds a word only once whitespace
            # follows it, and the opening's last word ("is") would otherwise wait for the LLM's first
            # token while a front-end that has caught up with the feed falls silent
            self._pass_on(st, opening + " ")
        st.task = asyncio.get_running_loop().create_task(self._run(st, request))

    def _refit_prefill(self, asked: str) -> None:
        """The opening in full no longer fits the question, though the opening said still does ("It is" of "The
        capital of Austria is", the question now "...of Australia?"): the LLM went on from the old subject and
        answered it ("It is Vienna.", "It is 6." for the square root of 64). It goes on from the question's own
        opening where the one said begins it or is its short form, else from the one said."""
        cfg = self.config
        full = restate(asked) if cfg.restate else None
        short = restate(asked, short=True, short_words=cfg.short_opening_words) if full else None
        if full and (goes_on_from(full, self._opening or "") or short == self._opening):
            self._prefill = full
        else:
            self._prefill = self._opening or ""

    def _go_on_from(self, said: str, asked: str) -> bool:
        """Let the opening go on from the words the reply has said (`SchedulerConfig.continue_said`); True where
        that changed it. Left as it is where it already goes on from them, or where nothing fitting can (words
        wrong for the question now, "The capital of Austria" for Australia: the reply repairs them)."""
        if self._opening and goes_on_from(self._opening, said):
            return False
        for opening in (self._prefill, restate(asked) if self.config.restate else None):
            if opening and goes_on_from(opening, said):
                self._opening = self._prefill = opening
                return True
        if (self._continues_replies() and not ends_sentence(said) and still_fits(said, asked)
                and len(said.split()) <= self.config.continue_said_words):
            self._opening = self._prefill = said  # the LLM goes on from them ("The" -> "The tallest animal is...")
            return True
        return False

    def _cancel(self, sid: int, reason: str) -> None:
        st = self._live.pop(sid, None)
        if st is None:
            return
        st.ended = "cancelled"
        if st.task is not None:
            st.task.cancel()  # closes the HTTP connection, which stops the server's generation
        self.stats["cancels"] += 1
        self.timeline.add(tl.LLM_CANCEL, stream=sid, reason=reason)

    def _note(self, kind: str, **data) -> None:  # noqa: ANN003 - a provider's event, on the timeline
        self.timeline.add(kind, **data)

    async def _run(self, st: LLMStream, request: OracleRequest) -> None:
        guard = RoleEchoGuard()
        repeat = RepeatGuard(earlier_replies(request.turns, request.standalone, partial=bool(request.partial)))
        try:
            async with aclosing(self.provider.answer(request, self._note)) as deltas:
                async for delta in deltas:
                    if st.sid not in self._live:
                        return
                    if st.first_token_t is None:
                        st.first_token_t = self.timeline.clock()
                        self.ttfts.append(st.first_token_t - st.started_t)
                        self.timeline.add(tl.LLM_FIRST_TOKEN, stream=st.sid,
                                          ttft_s=round(st.first_token_t - st.started_t, 4))
                    st.text += delta
                    self._pass_on(st, self._spliced(st, repeat.push(guard.push(delta))))
                    if guard.stopped or repeat.stopped:
                        break  # closing the stream closes the request, as a cancel does
            if st.sid not in self._live:
                return
            rest = "" if repeat.stopped else repeat.push(guard.flush()) + repeat.flush()
            self._pass_on(st, self._spliced(st, rest, end=True))
            st.ended = "done"
            cut = "role marker" if guard.stopped else "an earlier reply again" if repeat.stopped else None
            self.timeline.add(tl.LLM_DONE, stream=st.sid, text=st.text, **({"cut": cut} if cut else {}))
            if self._adopted == st.sid:
                if st.quiet is not None:  # the whole reply was within the oracle held
                    rest = self._agreeing(st, "", end=True)
                    if rest:
                        self._send("append", rest)
                if not self._held_ended:
                    self._send("end")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - LLMError, or any provider's failure: the session goes on
            st.ended = "failed"
            self.stats["errors"] += 1
            error = str(e) if isinstance(e, LLMError) else f"{type(e).__name__}: {e}"
            away = isinstance(e, LLMUnavailable)  # an outage: the LLM's client logs it once (llm/outage.py)
            self.timeline.add(tl.LLM_ERROR, stream=st.sid, error=error, **({"unavailable": True} if away else {}))
            (log.debug if away else log.warning)("oracle stream %d (%s) failed: %s", st.sid, self.provider.name, error)
        finally:
            self._live.pop(st.sid, None)

    async def aclose(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        tasks = [st.task for st in self._live.values() if st.task is not None]
        for sid in list(self._live):
            self._cancel(sid, "session ended")
        for t in tasks + ([self._ticker] if self._ticker else []):
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - already recorded
                pass
