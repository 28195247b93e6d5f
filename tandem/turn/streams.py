"""An oracle stream as the scheduler keeps it, the scheduler's options, and the text comparisons between
the oracle held and a newer reply (spacing aside, as the front-end reads it token by token)."""
from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Callable

from ..llm.prompt import DEFAULT_FORM
from ..think.restate import SHORT_OPENING_WORDS, Splicer, stops_unfinished

# a newer reply that has left the answer held is judged by the time it has gone on this many words more
# than the held one without ending a sentence (`keep_same_answer`)
ANSWER_TOLD_WORDS = 6
OracleEmit = Callable[[str, str], None]  # ("reset" | "restart" | "append" | "end" | "settled", text)


def whole_words(text: str) -> int:
    """Words that Whisper did not mark as cut off ("St- St- St... St" is one word: a stammered "Stop")."""
    return len(normalized(" ".join(w for w in text.split() if not re.search(r"(?:-|\.\.\.|…)$", w))).split())


def normalized(text: str) -> str:
    """Words only: a partial that changes only its punctuation or case is not a revision."""
    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower()).split())


def squeezed(text: str) -> str:
    """Text without its whitespace: the oracle is compared as the front-end reads it, token by token."""
    return "".join(text.split())


def answer_told(held: str, reply: str) -> bool:
    """The reply has ended a sentence where it no longer says what `held` does, or gone on for
    ANSWER_TOLD_WORDS words more than `held` has: enough to judge the answer it gives."""
    h, r = squeezed(held), squeezed(reply)
    i = next((k for k in range(min(len(h), len(r))) if h[k] != r[k]), min(len(h), len(r)))
    return bool(re.search(r"[.!?]", r[i:])) or len(reply.split()) >= len(held.split()) + ANSWER_TOLD_WORDS


def ends_sentence(text: str) -> bool:
    """Whisper's closing punctuation: "?", "!" or a full stop, not the "..." it marks a cut-off word with."""
    return bool(re.search(r"[?!]$|[^.]\.$", text))


def reads_whole(text: str) -> bool:
    """`text` ends as a whole sentence: Whisper's closing punctuation, no word marked cut off ("...of
    Aust..."), no function word last ("What is the capital of?")."""
    text = text.strip()
    return ends_sentence(text) and not stops_unfinished(text)


def rest_after(held: str, reply: str) -> str | None:
    """`reply` past the part of it that says `held` (spacing aside), or None if it does not begin so."""
    want = squeezed(held)
    i = n = 0
    while n < len(want):
        if i >= len(reply):
            return None
        c = reply[i]
        i += 1
        if c.isspace():
            continue
        if c != want[n]:
            return None
        n += 1
    rest = reply[i:]
    return rest.lstrip() if held[-1:].isspace() else rest


@dataclass(frozen=True)
class SchedulerConfig:
    check_interval_s: float = 0.5
    min_new_words: int = 2
    # a partial starts a stream only once the user's turn holds this many words (a final always does):
    # from 2 ("How I'm...") SmolLM2 answered "I'm sorry for your loss", and with one stream at a time
    # that junk stayed the oracle while each later stream was cancelled by the next partial
    min_turn_words: int = 3
    max_starts: int = 5
    window_s: float = 2.0
    max_concurrent: int = 1
    max_tokens: int = 60
    restart_on_revision: bool = True
    min_words_for_revision: int = 3
    check_on_partial: bool = True  # start on the partial itself, not up to check_interval_s later
    # start when the turn reads as a whole question: its partial ends a sentence ("...of Australia.") or
    # it resolves to one ("and the capital of Australia"), whatever the count of new words
    start_on_complete: bool = True
    # while other sessions' requests fill the shared LLM, start only on a whole question or a final: each
    # start from a growing partial queues behind theirs and is mostly cancelled by the next one
    defer_when_busy: bool = True
    keep_on_same_final: bool = True
    restate: bool = True  # open each stream with the answer's opening restated from the question
    # a long opening's subject said as "It" while the LLM's first tokens come this soon (median of the
    # session's last streams): the reply is there before a long opening would have been said
    short_opening_ttft_s: float = 1.0
    short_opening_words: int = SHORT_OPENING_WORDS  # a longer opening is the one said short (restate.py)
    # ask each turn as it stands alone: a follow-up fragment resolved, its lead-in dropped (the cascade's too)
    standalone: bool = True
    # the prompt's form, the cascade's too (tandem/llm/prompt.py: chat messages, KAME's lines, or "auto")
    prompt_form: str = DEFAULT_FORM
    # a newer stream that says what the oracle already holds does not reset it: the oracle stays as it is
    # while the new reply agrees, and takes only what the new reply adds. Without it a final's stream
    # cut a right answer from a partial back to the restated opening, the front-end stopped in the
    # middle of "William" and waited half a second for the same words ("Wil... li am Sh... ak es peare")
    keep_agreeing_oracle: bool = True
    # a partial decoded as the user paused, holding all they said, that reads as a whole sentence ("How many
    # legs does a spider have?") counts as the turn's final: its stream answers it, and the oracle is settled
    # as soon as it answers it, about 0.2 s before the endpoint's final with one session (which will be the
    # same words, the Listener's reuse). The front-end takes such a turn SETTLED_TURN_WAIT_FRAMES after the voice stopped,
    # where it would otherwise wait for the final: under load the model let such turns pass until then
    settle_on_pause: bool = True
    # a newer stream whose reply gives the answer held in other words ("It has 8 legs." for "A spider has 8
    # legs.", same_answer.py) keeps the held one: the front-end, saying it, would take it back for nothing
    keep_same_answer: bool = True
    # a partial the user went on past (the Listener's `said_more`) ends no question with its closing punctuation:
    # at 6 sessions "What is the capital?" started a stream that said "It is New York City." before the final's
    # answer came, and a spurious start is a request the shared LLM serves while others wait
    cut_ends_no_question: bool = True
    # a stream started once the reply has said words goes on from them: an opening that begins with them, else
    # (an LLM that continues replies) the words themselves, where they still fit the question. Opened afresh, the
    # final's "It is the blue whale." met a reply that had said the partial's "The" ("The... sorry, it is...")
    continue_said: bool = True
    continue_said_words: int = 8  # more said than this is a clause of its own, not an opening to go on from


@dataclass
class LLMStream:
    sid: int
    task: asyncio.Task | None = None
    started_t: float = 0.0
    first_token_t: float | None = None
    text: str = ""
    emitted: bool = False  # some of its reply got past the role guard
    ended: str = ""  # "", "done", "cancelled", "failed"
    splicer: Splicer | None = None  # set when the stream opens with a restated opening
    # adopted while the oracle already held text (keep_agreeing_oracle): its reply so far, not yet sent,
    # for as long as the oracle held begins with it; None once it is the oracle's own
    quiet: str | None = None
    final: bool = False  # started on the turn's final transcript, or kept by it (it answers the final)
    same_answer: bool = False  # its reply rewords the answer held, which stays (`keep_same_answer`)

    @property
    def usable(self) -> bool:
        """Still running, or finished having given a reply: its oracle stands."""
        replied = self.splicer.continued if self.splicer is not None else self.emitted
        return self.ended == "" or (self.ended == "done" and replied)
