"""How an adopted LLM stream's text becomes oracle events: spliced onto the restated opening, adopted (at
once, or quietly while it agrees with the oracle held), appended, or reset when it says something else. The
scheduler (scheduler.py) decides when streams start and end; this half of it, what reaches the oracle."""
from __future__ import annotations

from ..record import timeline as tl
from ..speak.openers import OPENING_FALLBACK, gave_up
from ..think.same_answer import same_answer
from .streams import LLMStream, answer_told, rest_after, squeezed


class OracleFeed:
    """The oracle-side half of `OracleScheduler`; its state (the oracle held, the adopted stream, the
    live streams) is the scheduler's own."""

    def _spliced(self, st: LLMStream, text: str, end: bool = False) -> str:
        """The reply as the continuation of the stream's opening (as it came when there is none).
        A reply that gave nothing the opening could go on with ends it with a fallback, so the
        front-end is not left in the middle of a sentence."""
        sp = st.splicer
        if sp is None:
            return text
        replaced_before = sp.replaces
        out = (sp.push(text) if text else "") + (sp.flush() if end else "")
        if out and sp.replaces and not replaced_before and self._adopted == st.sid:
            if st.quiet is not None:
                st.quiet = ""  # compared afresh: the reply now begins without the opening
            else:
                self._send("reset")  # the reply could not continue the opening: it replaces it, once
            self._drop_opening()  # and a later stream of this turn must not bring the opening back
            self.timeline.add(tl.LLM_CHUNK, stream=st.sid, text="", replaced_opening=True)
        if end and not sp.continued:
            return OPENING_FALLBACK
        return out

    def _send(self, kind: str, text: str = "") -> None:
        """An oracle event to the session, with the text it holds kept in step."""
        if kind == "reset":
            self._held, self._held_ended, self._held_stale = "", False, False
            self._refeed_when_settled = False  # the new oracle is fed as it comes
            if self._restart_due:
                kind, self._restart_due = "restart", False
        elif kind == "append":
            self._held += text
        elif kind == "end":
            self._held_ended = True
        self.emit(kind, text)

    def _pass_on(self, st: LLMStream, text: str) -> None:
        """Reply text of a stream: the first adopts the stream (a reply that never gets past the
        guard never replaces the one being spoken); the adopted stream's text goes to the oracle."""
        if not text:
            return
        if not st.emitted:
            st.emitted = True
            self._adopt(st)
        if self._adopted != st.sid:
            return
        if st.quiet is not None:
            text = self._agreeing(st, text)
            if not text:
                return
        self._send("append", text)
        self.timeline.add(tl.LLM_CHUNK, stream=st.sid, text=text)

    def _agreeing(self, st: LLMStream, text: str, end: bool = False) -> str:
        """For a stream adopted quietly: what to append of its reply so far (`text` the newest piece).
        While the oracle held begins with the reply, nothing; once the reply goes beyond it, the rest
        (after a reset, if the oracle held had ended or says something else), unless, while the front-end
        says the held answer, the reply gives that answer in other words (`keep_same_answer`): then nothing."""
        reply = (st.quiet or "") + text
        held, said = squeezed(self._held), squeezed(reply)
        prefix = held.startswith(said)
        if st.same_answer or (prefix and not (end and said != held)):
            st.quiet = reply
            if said == held:
                self._settle(st.final)  # all the oracle holds is confirmed
            return ""
        # judged only while the front-end says the held answer, where a reset is a repair: before, the newer
        # stream's reply (of more of the question) goes at once, and a wrong guess held is not read meanwhile.
        # A reply that ends within the held answer is its shorter form: it ends the held one's longer tail
        if self.config.keep_same_answer and self._held_ended and not prefix and self._saying():
            if not (end or answer_told(self._held, reply)):
                st.quiet = reply  # judged once its answer is told
                return ""
            if same_answer(self._held, reply):
                st.quiet, st.same_answer = reply, True
                self.timeline.add(tl.LLM_KEEP, stream=st.sid, reason="the answer held, in other words", text=reply)
                self._settle(st.final)
                return ""
        st.quiet = None
        rest = None if self._held_ended else rest_after(self._held, reply)
        if rest is None:
            self._send("reset")
            rest = reply
        else:
            self.timeline.add(tl.LLM_CHUNK, stream=st.sid, text="", agreed=len(self._held))
        self._settle(st.final)
        return rest

    def _stands(self, st: LLMStream) -> bool:
        """The oracle held is this stream's answer: its own, or (adopted quietly) its reply has said all of it
        or the same answer in other words. Until then what is held is an older stream's, from a partial: settled
        at the final's keep, the front-end read "New York City." ahead from "What is the capital?"'s stream while
        the final's stream ("It is Paris.") had said only "It is" (6 sessions, the answer 0.2 s later)."""
        return st.quiet is None or st.same_answer or squeezed(st.quiet) == squeezed(self._held)

    def _saying(self) -> bool:
        """The front-end has begun its reply to this turn, or its voice is busy."""
        return self.conv.reply_under_way() or self.talking()

    def _held_quietly(self) -> bool:
        """The oracle holds an answer for this turn that a newer stream keeps while its reply agrees."""
        return (self.config.keep_agreeing_oracle and bool(self._held.strip()) and not self._held_stale
                and not gave_up(self._held))  # a fallback held is no answer to keep ("It is something I am not sure of")

    def _adopt(self, st: LLMStream) -> None:
        if self._adopted is not None and self._adopted > st.sid:
            return  # a newer stream already speaks; this one is stale
        for sid in [s for s in self._live if s < st.sid]:
            self._cancel(sid, "older than adopted")
        self._adopted = st.sid
        self.stats["adoptions"] += 1
        if self._held_quietly():
            st.quiet = ""  # the oracle held stays until this reply says something else
            self.timeline.add(tl.LLM_ADOPT, stream=st.sid, quiet=True)
            if not st.final:
                self._settle(False)
            # a final's stream settles the oracle once its reply confirms what is held, or replaces it
            # (`_agreeing`): what a partial's stream said is not read ahead as the final's answer before
        else:
            self.timeline.add(tl.LLM_ADOPT, stream=st.sid)
            self._send("reset")
            self._settle(st.final)
