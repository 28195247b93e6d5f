"""How the compact front-end decides, frame by frame: one state object per session and one step.

`CompactState` holds everything a session's decoding remembers between frames (the way Moshi's
streaming modules hold theirs): what it has heard of the transcript, its previous token, the
turn-start chance, the loop guard. `step` runs one frame for any number of sessions: their inputs in
one batched model call over rows of the model's cache, then each state's decision. The single
front-end, the server's pool, replay and `tandem evaluate` all decode through it, so they share one
copy of the rules.

How a distribution becomes a token: greedy, except for the moment a reply starts (turn_start.py).

Copying a word cannot garble it (`word_rest`): once the model has copied the first piece of an oracle
word (the pointer put at least COPY_CURSOR_WEIGHT on the frame it came from), the rest of that word's
pieces are read from the oracle frames after it, one per frame, as the teacher always says them. The
model decides where to start and whether to go on at each word boundary; within a word it cannot lose
its place ("Port ugal", "pres ident" were a piece generated as the start of a new word), and after a
word read from the oracle it cannot add pieces to it ("freezinging", "Fahrenheititit").

The voice reads ahead of the model within a clause it has begun to copy (`ahead.voice_ahead`).
"""
from __future__ import annotations

from collections import Counter, deque
from itertools import islice
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from ...speak.frontend import speaking
from ...turn.machine import ANSWER_DUE, HOLD_EXPIRED, State, TurnMachine
from .model import CompactLM
from .ahead import COPIED_WEIGHT, VoiceRun, clause_ends, fed_token, voice_ahead
from .turn_start import (MAX_MAY_GO_ON_WAIT_FRAMES, MAX_TELLING_WAIT_FRAMES, MAX_TURN_WAIT_FRAMES,
                         MAX_UNFINISHED_WAIT_FRAMES, TurnStart, turn_due)
from .commit import CommitGate
from .repair import REPAIR, RepairWatch
from .streams import UserTokenQueue, vad_bucket
from .tokenizer import END, PAD, START

# the user's holds of the floor that end after so many quiet frames (`CompactState.held`)
WAITS = {State.USER_UNFINISHED: MAX_UNFINISHED_WAIT_FRAMES, State.USER_MAY_GO_ON: MAX_MAY_GO_ON_WAIT_FRAMES,
         State.USER_TELLING: MAX_TELLING_WAIT_FRAMES}

if TYPE_CHECKING:
    from .tokenizer import CompactTokenizer

RESPONSE_GAP_FRAMES = 6  # this much silence before a word makes it the first word of a response
COPY_CURSOR_WEIGHT = COPIED_WEIGHT  # the pointer's weight on a copied piece's frame for the rest of its word to follow
REPEAT_WINDOW_FRAMES = 24  # a word said again within this many frames of itself is a repeat (1.9 s)
MAX_LOOP_BLOCK = 8  # tokens; longer repeats are rephrasings ("The capital of... sorry, the capital of...")

def without_yield(logp: torch.Tensor) -> torch.Tensor:
    """`logp` with END (the model's "I stop for the user talking over me") taken out and the rest
    renormalised: a model trained to yield says END while the user talks over its reply, and only
    then; with the user silent it would only feed itself END again (its input is its own last token)
    and never take the turn that follows."""
    out = logp.clone()
    out[END] = float("-inf")
    return out - torch.logsumexp(out, dim=-1)


def completes_a_loop(said: list[int], tok: int) -> bool:
    """Would `tok` make the response end in the same block said three times over (four for a single
    token: "1000" is three zeros)? Greedy copying that loses its place in the oracle repeats itself
    ("yen (JPY) yen (JPY) yen (JPY)", "int int int"); a speaker would stop instead."""
    seq = said[-3 * MAX_LOOP_BLOCK:] + [tok]
    for k in range(1, MAX_LOOP_BLOCK + 1):
        reps = 4 if k == 1 else 3
        if len(seq) < k * reps:
            break
        block = seq[-k:]
        if all(seq[-(i + 1) * k: len(seq) - i * k] == block for i in range(1, reps)):
            return True
    return False


@dataclass
class CompactState:
    """One session's decoding state. Made by `new` (a fresh session) and advanced only by `decide`."""
    user_q: UserTokenQueue  # the transcript as heard, turned into the user token stream
    prev: int = PAD  # the token chosen last frame, fed back as this frame's input
    turn_start: TurnStart = field(default_factory=TurnStart)
    quiet_run: int = RESPONSE_GAP_FRAMES  # frames since the last word
    began_reply: bool = False  # this frame's token began a response
    said: list[int] = field(default_factory=list)  # the current response's tokens, for the loop check
    looping: bool = False  # a loop was cut: silence until the model itself chooses silence
    loops_stopped: int = 0
    emitted: deque[int] = field(default_factory=lambda: deque(maxlen=4096))  # recent tokens, for inspection
    starts_word: Callable[[int], bool] | None = None  # the tokenizer's; None: no word cursor (`word_rest`)
    cursor: int | None = None  # the oracle frame of the piece the word cursor gave last (`word_rest`)
    # oracle pieces for the voice to say now after this frame's token, ahead of the model (`voice_ahead`)
    ahead: list[int] | None = None
    voiced: bool = False  # this frame's token was handed to the voice ahead of the model already
    run: VoiceRun | None = None
    # True for pieces that end a clause; None: the voice reads ahead only to the end of a word
    ends_clause: Callable[[int], bool] | None = None
    ahead_words: int = 99  # whole words the voice may be handed ahead of the model
    repair_first: bool = True  # DecodeRules.repair_first
    settled_turn: bool = True  # DecodeRules.settled_turn
    # since the user began the turn not yet replied to: an oracle stream (re)started (its start token was
    # fed), and then fed words: an answer is waiting (MAX_TURN_WAIT_FRAMES)
    oracle_started: bool = False
    answer_waiting: bool = False
    after_drop: bool = False  # an interruption dropped the reply, and no new reply has begun (`hush`)
    hushed: bool = False  # the dropped reply's words are not said (`hush`)
    floor: TurnMachine | None = None  # the conversation's turn machine (`held`); None: decoding alone
    repair: RepairWatch | None = None  # "sorry," when a newer oracle contradicts the reply (`repair.py`); None: off
    commit: CommitGate | None = None  # before the answer settles, only words it cannot take back (`commit.py`); None: off
    # since the oracle's last start token: its words fed, and the words begun, by their first piece (`rereads_word`)
    oracle_words: Counter[int] = field(default_factory=Counter)
    begun_words: Counter[int] = field(default_factory=Counter)
    _continuations: torch.Tensor | None = None  # [V] True for pieces that go on a word (not a word start)

    def continuations(self, vocab: int) -> torch.Tensor:
        if self._continuations is None or len(self._continuations) != vocab:
            self._continuations = torch.tensor([i > END and not self.starts_word(i) for i in range(vocab)])
        return self._continuations

    @classmethod
    def new(cls, encode: Callable[[str], list[int]], starts_word: Callable[[int], bool] | None = None,
            repair_ids: list[int] | None = None, ends_clause: Callable[[int], bool] | None = None) -> "CompactState":
        """`repair_ids`: the tokens of `repair.REPAIR`, to repair as the teacher does; None: the model alone."""
        return cls(UserTokenQueue(encode, PAD), starts_word=starts_word,
                   repair=RepairWatch(repair_ids) if repair_ids else None, ends_clause=ends_clause)

    def hear(self, transcript: str) -> tuple[int, int]:
        """This frame's two user tokens, from the transcript as the Listener hears it now."""
        self.user_q.update(transcript)
        a, b = self.user_q.next(2)
        return a, b

    def hush(self) -> None:
        """The user's interruption dropped the reply: the model is fed silence until it chooses silence
        itself (or an answer to the interruption has waited MAX_TURN_WAIT_FRAMES), so the dropped reply
        is not carried on in the user's next pause; the answer to wait for is the interruption's."""
        self.hushed = True
        self.after_drop = True
        self.oracle_started = self.answer_waiting = False
        # the user has spoken and the model's reply is gone: the turn is armed for the interruption's answer,
        # even where the model's last word came after the user's voice had stopped (a loadtest's "It was",
        # dropped by the final's words: the answer fed again was never taken)
        self.turn_start.armed, self.turn_start.quiet = True, 0

    @staticmethod
    def _nothing_said(tok: int) -> bool:
        return True  # any first word: no word of the settled answer has been begun

    def withdrawn(self) -> None:
        """The machine withdrew the reply begun, unheard: the model is hushed, the word it copied is not
        finished, and nothing of it is repaired (a "sorry," began a later reply that nobody heard the
        first words of)."""
        self.hush()
        self.cursor = None
        if self.repair is not None:
            self.repair.forget()

    def held(self) -> bool:
        """The user holds the floor (`TurnMachine.user_holds_floor`), which this tells the machine it gives back:
        after interrupting (INTERRUPTED), what the model says would be said in a pause of the interruption from
        the answer it interrupted, until an answer to the interruption is fed or the user has been quiet for
        MAX_TURN_WAIT_FRAMES (ANSWER_DUE); inside an unfinished clause (USER_UNFINISHED), until the user goes on
        or has been quiet for MAX_UNFINISHED_WAIT_FRAMES (HOLD_EXPIRED); in a message the turn-end judge reads as
        going on (USER_MAY_GO_ON), the same for MAX_MAY_GO_ON_WAIT_FRAMES; in a telling (USER_TELLING), for
        MAX_TELLING_WAIT_FRAMES."""
        if self.floor is None or not self.floor.user_holds_floor:
            return False
        if self.floor.state in WAITS:
            if self.turn_start.quiet >= WAITS[self.floor.state]:
                self.floor.on(HOLD_EXPIRED)
                return False
            return True
        if not self.after_drop:
            return False
        if self.answer_waiting or self.turn_start.quiet >= MAX_TURN_WAIT_FRAMES:
            self.floor.on(ANSWER_DUE)
            return False
        return True

    def repeats_last_word(self, tok: int) -> bool:
        """Would `tok` say again the one-piece word said last ("gold is is is Au.")? A front-end that
        has caught up with the oracle feed, waiting for its next word, tends to say the last one
        again; a speaker says "had had" far less often than this happens. Counted in frames, not in
        the response's tokens (`said`), since a wait longer than RESPONSE_GAP_FRAMES starts a new one."""
        if self.starts_word is None or not self.starts_word(tok):
            return False
        last = next((t for t in islice(reversed(self.emitted), REPEAT_WINDOW_FRAMES) if t > END), None)
        return last == tok

    def says_again(self, tok: int) -> bool:
        """`tok` would say a word again that the guards below stop (`repeats_last_word`, `rereads_word`)."""
        return tok > END and (self.repeats_last_word(tok) or self.rereads_word(tok))

    def fed(self, oracle: int) -> None:
        """This frame's oracle token: a start token begins a new oracle, whose words are counted afresh."""
        if oracle == START:
            self.oracle_words.clear()
            self.begun_words.clear()
        elif oracle > END and self.starts_word is not None and self.starts_word(oracle):
            self.oracle_words[oracle] += 1

    def rereads_word(self, tok: int) -> bool:
        """Would `tok` begin an oracle word more often than the oracle has fed it ("It has 8 8 legs.",
        "William William Shakespeare", "8 legs. 8 legs.")? Waiting for the oracle's next word, the model's
        pointer goes back to the words just read; `repeats_last_word` sees only a one-piece word said
        twice in a row. A word the oracle says twice may be said twice; words it does not hold are the
        model's own, and not counted."""
        if self.starts_word is None or not self.starts_word(tok):
            return False
        fed = self.oracle_words[tok]
        return fed > 0 and self.begun_words[tok] >= fed

    def decide(self, logp: torch.Tensor, vad_prob: float, forced: int | None = None, settled: bool = False,
               opening: int | None = None) -> int:
        """The token for this frame from the model's log-probabilities `logp` [V]: greedy with
        `TurnStart`, then the loop guard. `forced` replaces the decision (evaluation holds a model
        silent to see whether it recovers), as if the model had chosen it. `settled`: the oracle
        answers the turn's final transcript (`turn_due`); `opening`: the newest oracle stream's first piece
        (`TurnStart.choose`)."""
        settled = settled and self.settled_turn
        ends = settled and self.floor is not None and self.floor.words_end
        if not speaking(vad_prob):
            logp = without_yield(logp)
        if forced is None and not self.hushed and self.floor is not None \
                and self.floor.state in WAITS and self.held():
            self.turn_start.hold(vad_prob)  # the user holds the floor in their pause: no turn to take, counted as quiet
            forced = PAD
        if self.hushed and forced is None:
            # it stopped by itself, once the Mouth no longer holds back (a frame's silence while the user still
            # spoke lifted it, and the dropped reply it went on with, kept unsaid, never let the turn arm for the
            # interruption's answer), or the interruption's answer is due
            if (int(torch.argmax(logp)) <= END and not self.held()) \
                    or turn_due(self.answer_waiting, self.turn_start.quiet, settled, ends):
                self.hushed = False
            else:
                self.turn_start.hold(vad_prob)  # its words are the dropped reply's, not a new one
                forced = PAD
        self.turn_start.took_opening = False
        # only the first word of the reply that replaces one the user dropped is put back to the oracle's start:
        # elsewhere a word further on is the reply going on after a wait ("The play [wait] was written by")
        # and a reply to a settled answer, nothing of it said yet, begins where the answer does: the model's own
        # first word ("I", "Well,") was followed by "sorry," and the answer ("I, sorry, the Eiffel Tower is in Paris.")
        in_oracle = self.oracle_words.__contains__ if self.after_drop else (
            self._nothing_said if settled and not self.begun_words else None)
        before = (self.turn_start.armed, self.turn_start.chance, self.turn_start.quiet)
        tok = (self.turn_start.choose(logp, vad_prob, self.answer_waiting, settled, opening, in_oracle, ends)
               if forced is None else forced)
        if forced is None and tok > END and self.commit is not None and self.starts_word is not None \
                and self.starts_word(tok) and self.commit.holds(tok, self.user_q.seen, settled, bool(self.oracle_words)):
            # a word the answer to the final may take back: wait for it, the turn still to take if not yet taken
            self.turn_start.armed, self.turn_start.chance, self.turn_start.quiet = before
            self.turn_start.hold(vad_prob)
            tok = PAD
        self.began_reply = False
        if tok <= END:
            self.looping = False  # the model stopped by itself: it may speak again
        elif self.says_again(tok):
            tok = PAD  # fed back as silence: the model waits for the oracle's next word instead
        else:
            if self.starts_word is not None and self.starts_word(tok):
                self.begun_words[tok] += 1
            if self.quiet_run >= RESPONSE_GAP_FRAMES:
                self.said = []
                self.began_reply = True
                self.oracle_started = self.answer_waiting = self.after_drop = False
            if not self.looping and completes_a_loop(self.said, tok):
                self.looping = True
                self.loops_stopped += 1
            if self.looping:
                tok = PAD  # fed back as silence, so the model sees that it stopped
            else:
                self.said = self.said[-3 * MAX_LOOP_BLOCK:] + [tok]
        self.prev = tok
        self.emitted.append(tok)
        self.quiet_run = self.quiet_run + 1 if tok <= END else 0
        return tok


@dataclass(frozen=True)
class DecodeRules:
    """The rules over the model's own choices, each of which can be turned off to measure it."""
    word_cursor: bool = True  # `word_rest`: a copied oracle word is finished from the oracle
    repair: bool = True  # `repair.RepairWatch`: "sorry," when a newer oracle contradicts the reply
    voice_ahead: bool = True  # `voice_ahead` to the end of the clause; off: to the end of the copied word
    ahead_words: int = 99  # at most this many whole words ahead of the model
    repair_first: bool = True  # a settled newer oracle is judged on all it holds, and a due repair is said before any word ahead
    settled_turn: bool = True  # a settled answer takes the turn SETTLED_TURN_WAIT_FRAMES after the voice stops (`turn_due`)
    commit: bool = True  # `commit.CommitGate`: before the answer settles, only words it cannot take back

    def state(self, tokenizer: "CompactTokenizer", encode: Callable[[str], list[int]] | None = None) -> CompactState:
        """A fresh session state; `encode` turns the transcript into user tokens (the tokenizer's by default)."""
        st = CompactState.new(encode or tokenizer.encode, tokenizer.starts_word if self.word_cursor else None,
                              tokenizer.encode(REPAIR) if self.repair else None,
                              clause_ends(tokenizer) if self.voice_ahead and self.word_cursor else None)
        st.ahead_words = self.ahead_words
        st.repair_first = self.repair_first
        st.settled_turn = self.settled_turn
        if self.commit and self.word_cursor:
            st.commit = CommitGate(lambda t: tokenizer.decode([t]))
        return st


@dataclass(frozen=True)
class FrameInput:
    """What one session gives the model in one frame."""
    user: tuple[int, int]
    vad_prob: float
    oracle: int
    forced: int | None = None  # see CompactState.decide
    settled: bool = False  # the oracle answers the turn's final transcript (UserFrame.oracle_settled)
    upcoming: tuple[int, ...] | None = None  # its tokens for the frames after this one (UserFrame.oracle_upcoming)


def step(model: CompactLM, cache: dict[str, torch.Tensor], rows: Sequence[int], states: Sequence[CompactState],
         inputs: Sequence[FrameInput]) -> list[int]:
    """One frame for each session: `states[i]` with `inputs[i]`, its model state in row `rows[i]` of
    `cache` (rows not listed are stepped on PAD and must be unused). One batched model call, then each
    state's decision; returns the tokens."""
    size = cache["pos"].shape[0]
    user = torch.full((size, 2), PAD, dtype=torch.long)
    vad = torch.zeros(size, dtype=torch.long)
    oracle = torch.full((size,), PAD, dtype=torch.long)
    prev = torch.full((size,), PAD, dtype=torch.long)
    for r, st, x in zip(rows, states, inputs):
        user[r, 0], user[r, 1] = x.user
        vad[r], oracle[r], prev[r] = vad_bucket(x.vad_prob), x.oracle, st.prev
    logp = model.step(cache, user, vad, oracle, prev)
    out = []
    for r, st, x in zip(rows, states, inputs):
        st.fed(x.oracle)
        rest = word_rest(cache, r, st) if x.forced is None else None
        lp = logp[r]
        if st.turn_start.armed:  # the words of an older answer's tail, fed during the reply, do not count
            if x.oracle == START:
                st.oracle_started = True
            elif st.oracle_started and END < x.oracle < lp.shape[0]:
                st.answer_waiting = True
        if rest is None and x.forced is None and copied_word_ended(cache, r, st):
            lp = lp.masked_fill(st.continuations(lp.shape[0]), float("-inf"))  # the word is whole: no more pieces
            lp = lp - torch.logsumexp(lp, dim=-1)
        forced = x.forced
        if st.repair is not None:
            st.repair.hears(speaking(x.vad_prob))
            st.repair.fed(x.oracle, x.upcoming if st.repair_first else None)
            # at a word boundary (the word under way is finished first); once begun, a repair is said whole:
            # the cursor must not read "sorry" on as "Dorzain"
            if forced is None and not st.hushed and not speaking(x.vad_prob) and (rest is None or st.repair.under_way):
                forced = st.repair.next_token()
            lp = st.repair.no_second_repair(lp)
        if forced is None and rest is not None:
            forced = rest[1]
        # only a turn taken for the model reads it (`TurnStart.choose`), never while the user speaks
        opening = (opening_piece(cache, r, st, lp.shape[0])
                   if st.turn_start.armed and st.answer_waiting and not speaking(x.vad_prob) else None)
        # a reply the commit gate held, or one whose model would say its last word again or a "sorry," nothing calls
        # for, goes on with the settled answer's next word: held, the model lost its place ("It is [held] Aires."
        # for "It is Buenos Aires.", "the [the, the...] Giza are" for "the pyramids of Giza are")
        top = int(torch.argmax(lp)) if forced is None else None
        needless = top is not None and st.repair is not None and st.repair.needless(top)
        resume = (resume_piece(cache, r, st, lp.shape[0]) if top is not None and st.commit is not None and x.settled
                  and not speaking(x.vad_prob) and (st.commit.waited or st.says_again(top) or needless) else None)
        if resume is not None:
            forced = resume[1]
            st.commit.resumed()
        elif needless:
            forced = PAD  # the agreeing answer's next word is not fed yet: wait for it
        tok = st.decide(lp, x.vad_prob, forced, x.settled, opening[1] if opening else None)
        if st.repair is not None:
            st.repair.said(tok, st.began_reply)
        if st.turn_start.took_opening and opening is not None:
            st.cursor = opening[0]  # the word goes on from the oracle, and the voice reads ahead from it
        elif resume is not None and tok == resume[1]:
            st.cursor = resume[0]
        else:
            st.cursor = rest[0] if rest is not None and tok == rest[1] else None
        # with a repair due, "sorry," comes before any whole word ahead (the word under way is finished)
        hold = st.repair is not None and st.repair_first and st.repair.pending
        st.ahead = voice_ahead(cache, r, st, tok, lp.shape[0], x.settled and not hold, None if hold else x.upcoming)
        out.append(tok)
    return out


def opening_piece(cache: dict[str, torch.Tensor], r: int, st: CompactState, vocab: int) -> tuple[int, int] | None:
    """(oracle frame, piece) of the first word the newest oracle stream fed (row `r`, after `model.step`),
    or None: no stream, its first word not fed yet, or no word cursor to finish it with."""
    start = int(cache["reset_pos"][r]) if "reset_pos" in cache else -1
    if start < 0 or st.starts_word is None:
        return None
    for frame in range(start + 1, int(cache["pos"][r])):
        tok = fed_token(cache, r, frame)
        if tok is None or tok == PAD:
            continue
        return (frame, tok) if END < tok < vocab and st.starts_word(tok) else None
    return None


def resume_piece(cache: dict[str, torch.Tensor], r: int, st: CompactState, vocab: int) -> tuple[int, int] | None:
    """(oracle frame, piece) of the newest stream's word after the words the reply has said, when what it said
    is the stream's beginning ("It is" of "It is Buenos Aires."), or None: it said something else (the repair's
    to judge), or that word has not been fed yet."""
    start = int(cache["reset_pos"][r]) if "reset_pos" in cache else -1
    said = [t for t in st.said if t > END]
    if start < 0 or st.starts_word is None or not said:
        return None
    k = 0
    for frame in range(start + 1, int(cache["pos"][r])):
        tok = fed_token(cache, r, frame)
        if tok is None or tok <= END:
            continue
        if k == len(said):
            return (frame, tok) if tok < vocab and st.starts_word(tok) else None
        if tok != said[k]:
            return None
        k += 1
    return None


def copied_word_ended(cache: dict[str, torch.Tensor], r: int, st: CompactState) -> bool:
    """The piece just said ended a word read from the oracle (the cursor's, or one the pointer copied):
    a piece that goes on that word would garble it ("freezinging")."""
    if st.starts_word is None or st.prev <= END:
        return False
    return st.cursor is not None or float(cache["copied_w"][r]) >= COPY_CURSOR_WEIGHT


def word_rest(cache: dict[str, torch.Tensor], r: int, st: CompactState) -> tuple[int, int] | None:
    """(oracle frame, token) of the next piece of the oracle word whose last piece was just said
    (row `r` of `cache`, right after `model.step`), or None: the word is complete, the piece was not
    copied, the next one has not been fed yet, or `st` has no word cursor. Inside a word the cursor
    keeps its own place (`st.cursor`): the pointer may favour another frame holding the same piece
    ("Fahrenheit" read on as "Fahrenheititit")."""
    if st.starts_word is None or st.prev <= END:
        return None
    if st.cursor is not None:
        src = st.cursor
    elif float(cache["copied_w"][r]) >= COPY_CURSOR_WEIGHT:
        src = int(cache["last_src"][r])
    else:
        return None
    tok = fed_token(cache, r, src + 1)
    if tok is None:
        return None
    return (src + 1, tok) if tok > END and not st.starts_word(tok) else None
