"""The compact front-end at run time: one model step per frame, its text voiced just in time.

The model paces its words like speech (a word, then PAD frames for as long as the word takes to
say). A word is complete when the next word starts or a PAD follows; complete words go to the
voice as soon as the voice is about to run dry, so the first word is spoken at once and later
words are grouped into phrases with better prosody. Words the model copies from the oracle bring the
rest of their clause with them once the oracle is settled (ahead.voice_ahead), so the voice is not held to
the model's pace inside a clause it has begun to read.

The first word of a response does not wait for the next frame to prove it complete when its one
piece is a whole English word ("The", "It", "Sorry"): that frame (80 ms) is a fifth of the onset
budget, and a first word that goes on ("The" + "o") is rare.
"""
from __future__ import annotations

import logging
from collections import deque
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ...audio.frames import FRAME_SAMPLES, SAMPLE_RATE
from ...turn.backchannel import Decision
from ...turn.machine import Action, State, Transition, TurnMachine
from ...runtime.errors import FrontEndUnavailable
from ...speak.frontend import FrontEndOutput, UserFrame, speaking
from ...speak.tts import TTS, Voicer
from .decoding import MAX_LOOP_BLOCK, DecodeRules, FrameInput, completes_a_loop, step
from .tokenizer import END

DEFAULT_CHECKPOINT = Path(__file__).parent / "assets" / "compact.pt"
REFILL_S = 0.25  # hand the voice more text when less than this much audio is left
BACKCHANNEL_SAID = "Mm-hmm."  # a listener's acknowledgement of a statement the user may go on from


@lru_cache(maxsize=4)
def _lexicon() -> frozenset[str]:
    from .lexicon import english_words

    return frozenset(w.lower() for w in english_words())


def whole_word_pieces(tokenizer) -> frozenset[int]:
    """Ids of word-start pieces that are an English word on their own."""
    lex = _lexicon()
    out = set()
    for i in range(END + 1, tokenizer.vocab_size):
        if tokenizer.starts_word(i):
            w = tokenizer.decode([i]).strip().lower().rstrip(".,?!")
            if len(w) > 1 and w in lex:  # single letters often begin a longer name ("A" + "ustralia")
                out.add(i)
    return frozenset(out)


def _load(checkpoint: str | Path | None):
    from .checkpoint import load_checkpoint

    path = Path(checkpoint) if checkpoint else DEFAULT_CHECKPOINT
    if not path.exists():
        raise FrontEndUnavailable(f"compact front-end checkpoint not found at {path}; "
                                  f"train one with `tandem train compact`")
    return load_checkpoint(path)


class Mouth:
    """Turns a session's tokens into speech: words grouped as they complete, handed to the voice
    just in time, and paused when the user talks over it. The conversation's turn machine (`floor`,
    tandem/turn/machine.py; the session's own, or one of the mouth's when it is used alone) judges the
    talk-over, the same rule as the cascade's, and the mouth takes the actions of its transitions: YIELD
    pauses the voice, RESUME goes on after a backchannel or a cough, DROP drops what is queued for a real
    interruption; after a drop nothing is voiced until the user stops. A model trained to yield says END
    while the user talks over it: that drops the reply at once, the judge's rules remaining the safety net."""

    DECISIONS_KEPT = 64  # the latest barge-in decisions, for a log or a timeline to take
    _log = logging.getLogger(__name__)

    def __init__(self, tokenizer, whole_words: frozenset[int], tts: TTS | None) -> None:  # noqa: ANN001
        self.tokenizer = tokenizer
        self.whole_words = whole_words
        self.voicer = Voicer(tts) if tts is not None else None
        self.floor = TurnMachine()
        self.decisions: deque[Decision] = deque(maxlen=self.DECISIONS_KEPT)
        self.reset()

    def reset(self) -> None:
        self.word: list[int] = []
        self.pending: list[str] = []
        self.dropped = False  # a DROP decision since the front-end last looked (`take_drop`)
        self.floor.judge.reset()
        self.yielded = False  # the user interrupted the reply: nothing is voiced until they stop
        self.acking = False  # what the voice says is a backchannel (`acknowledge`)
        if self.voicer is not None:
            self.voicer.clear()

    def take_drop(self) -> bool:
        dropped, self.dropped = self.dropped, False
        return dropped

    def acknowledge(self) -> None:
        """A listener's backchannel in the user's pause (the machine's USER_MAY_GO_ON): said, never judged as a reply
        the user talks over; their voice stops it."""
        if self.voicer is not None and not self.voicer.busy:
            self.voicer.say(BACKCHANNEL_SAID)
            self.acking = True

    def withdraw(self) -> bool:
        """Drop a reply begun but not yet heard (the machine's WITHDRAW); returns whether there was one."""
        begun = bool(self.word or self.pending or (self.voicer is not None and self.voicer.busy))
        self.word, self.pending = [], []
        if begun and self.voicer is not None:
            self.voicer.clear()
        return begun

    def take_decisions(self) -> list[Decision]:
        out = list(self.decisions)
        self.decisions.clear()
        return out

    def _flush_word(self) -> None:
        if self.word:
            self.pending.append(self.tokenizer.decode(self.word).strip())
            self.word = []

    def say(self, tok: int, began_reply: bool, user: UserFrame, ahead: list[int] | None = None,
            hold: bool = False, voiced: bool = False) -> FrontEndOutput:
        """One frame: the model's token `tok`. `ahead`: oracle pieces to voice now, after `tok`, ahead of
        the model (ahead.voice_ahead: the rest of the word it copies and the words after it to the end
        of their clause); `voiced`: `tok` was handed to the voice so, and is not voiced again. `hold`:
        after an interruption dropped the reply, keep quiet in the user's pauses too
        (decoding.CompactState.held: the machine's INTERRUPTED state)."""
        if began_reply and not self.yielded:
            # barge-in counts the user's speech since the reply began: the voice activity of the
            # turn it answers lags a frame or two, and would otherwise cut its first word. Not after
            # a barge-in: a reply the model begins while the user still talks over it stays unsaid
            self.floor.judge.new_reply()
        if tok <= END or voiced:
            self._flush_word()
        else:
            if self.tokenizer.starts_word(tok):
                self._flush_word()
            self.word.append(tok)
            if began_reply and tok in self.whole_words:
                self._flush_word()  # the first word of a response goes to the voice at once
                if self.voicer is not None and not self.yielded and self.voicer.remaining_s() < REFILL_S:
                    self._voice_pending()  # alone: a short word is likelier cached, and plays in this frame
        for t in ahead or ():
            if self.tokenizer.starts_word(t):
                self._flush_word()
            self.word.append(t)
        if ahead:
            self._flush_word()
        talking_over = user.in_speech and speaking(user.vad_prob)
        if self.voicer is None:
            texts, self.pending = ([" ".join(self.pending)] if self.pending else []), []
            return FrontEndOutput(np.zeros(FRAME_SAMPLES, np.float32), texts)
        if self.acking and (talking_over or not self.voicer.busy):
            self.acking = False  # the backchannel is over, or the user goes on over it: it stops, nothing to judge
            if talking_over:
                self.voicer.clear()
        # after a drop the voice has nothing to defend (a synthesis already under way is thrown away)
        move = self.floor.talk_over(talking_over, user.transcript, self.voicer.busy and not self.yielded and not self.acking)
        self._take(move)
        if tok == END and talking_over and (move is None or Action.DROP not in move.actions):
            self._take(self.floor.model_yields())  # the model's own decision: it stops for this interruption
        if self.yielded:
            # the words of a frame in which the user still talks stay unsaid; in the frame they stop, the model's
            # word begins the reply to them (FDB dev set: "It is Warsaw." was heard "is Warsaw.")
            self.yielded = talking_over or hold
            if self.yielded:
                self.pending = []
        # while paused the voice's remaining audio does not shrink: the model's words wait in
        # `pending` and follow on after a resume
        if self.pending and self.voicer.remaining_s() < REFILL_S:
            self._voice_pending()
        audio, started = self.voicer.pull()
        return FrontEndOutput(audio, started)

    def _voice_pending(self) -> None:
        self.voicer.say(" ".join(self.pending))
        self.pending = []

    def _take(self, move: Transition | None) -> None:
        """The voice's part of a talk-over transition's actions."""
        if move is None:
            return
        d = move.decision
        self.decisions.append(d)
        self._log.debug("barge-in: %s (%s, %r, %.2f s of speech)", d.action, d.reason, d.words, d.speech_s)
        if Action.YIELD in move.actions:
            self.voicer.pause()
        if Action.RESUME in move.actions:
            self.voicer.resume()
        if Action.DROP in move.actions:  # a real interruption; the segment under way is cut where it paused
            self.voicer.clear()
            self.yielded = True
            self.dropped = True

    def close(self) -> None:
        if self.voicer is not None:
            self.voicer.close()
            self.voicer = None


class CompactFrontEnd:
    """One conversation's front-end: its decoding state (`state`), its row of a model cache, and its
    mouth. Built alone it loads its own model and cache of one row; built from a `CompactPool`
    (`pool.open(tts)`) it shares the pool's model and owns a row of the pool's cache, so the pool can
    step many sessions in one model call. Either way a frame is `decoding.step`."""

    name = "compact"

    def __init__(self, checkpoint: str | Path | None = None, tts: TTS | None = None, threads: int = 1,
                 pool: "CompactPool | None" = None, voice_ahead: bool = True, settled_turn: bool = True,
                 commit: bool = True) -> None:
        self.pool = pool
        if not (voice_ahead and settled_turn and commit):
            self.rules = DecodeRules(voice_ahead=voice_ahead, settled_turn=settled_turn, commit=commit)
        if pool is None:
            torch.set_num_threads(threads)
            self.model, self.tokenizer, self.meta = _load(checkpoint)
            self.cache = self.model.new_state(1)
            self.slot = 0
            whole_words = whole_word_pieces(self.tokenizer)
        else:
            self.model, self.tokenizer, self.meta = pool.model, pool.tokenizer, pool.meta
            self.cache = pool.cache
            self.slot = pool._acquire()
            whole_words = pool.whole_words
        self.mouth = Mouth(self.tokenizer, whole_words, tts)
        self.reset()

    rules = DecodeRules()  # the decoding rules over the model's choices; each can be turned off to compare

    def follow_turns(self, machine: TurnMachine) -> None:
        """Judge talk-over with the session's turn machine, so its transitions are the conversation's."""
        self.mouth.floor = self.state.floor = machine
        machine.takers.append(self._took_turn)

    def _took_turn(self, move: Transition) -> None:
        """A move of the machine (on the session's event loop): a withdrawal is taken at the next frame."""
        if Action.WITHDRAW in move.actions:
            self._withdraw = True
        if move.after is State.USER_MAY_GO_ON and move.before is not State.USER_MAY_GO_ON:
            self._ack_due = True  # a statement the user may go on from is acknowledged (`spoken`)

    def reset(self) -> None:
        self.model.reset_state(self.cache, self.slot)
        self.state = self.rules.state(self.tokenizer)
        self.state.floor = self.mouth.floor
        self.mouth.reset()
        self._withdraw = False  # the machine withdrew the reply begun (`_took_turn`), not yet taken
        self._ack_due = False

    # what tests, replay and the scheduler read of a session
    @property
    def voicer(self) -> Voicer | None:
        return self.mouth.voicer

    @voicer.setter
    def voicer(self, value: Voicer | None) -> None:
        self.mouth.voicer = value

    @property
    def whole_words(self) -> frozenset[int]:
        return self.mouth.whole_words

    @property
    def prev(self) -> int:
        return self.state.prev

    @property
    def emitted(self):  # noqa: ANN201 - deque[int]
        return self.state.emitted

    @property
    def loops_stopped(self) -> int:
        return self.state.loops_stopped

    def frame_input(self, user: UserFrame, oracle_token: int) -> FrameInput:
        return FrameInput(self.state.hear(user.transcript), user.vad_prob, int(oracle_token),
                          settled=user.oracle_settled, upcoming=user.oracle_upcoming)

    def step(self, user: UserFrame, oracle_token: int) -> FrontEndOutput:
        if self.pool is not None:
            return self.pool.step_many([self], [user], [oracle_token])[0]
        tok = step(self.model, self.cache, [0], [self.state], [self.frame_input(user, oracle_token)])[0]
        return self.spoken(tok, user)

    def spoken(self, tok: int, user: UserFrame) -> FrontEndOutput:
        """This frame's token through the Mouth; an interruption that dropped the reply hushes the model."""
        st = self.state
        if self._withdraw:
            self._withdraw = False
            if self.mouth.withdraw():
                st.withdrawn()  # the model is fed silence until it chooses silence: its withdrawn words stay unsaid
        if self._ack_due and not speaking(user.vad_prob):
            self._ack_due = False
            if self.mouth.floor.state is State.USER_MAY_GO_ON and user.transcript.rstrip().endswith((".", "!")):
                self.mouth.acknowledge()
        out = self.mouth.say(tok, st.began_reply, user, st.ahead, st.held(), st.voiced)
        if self.mouth.take_drop():
            self.state.hush()
        return out

    def step_batch(self, users: list[UserFrame], oracle_tokens: list[int]) -> list[FrontEndOutput]:
        return [self.step(u, t) for u, t in zip(users, oracle_tokens)]

    def close(self) -> None:
        self.mouth.close()
        if self.pool is not None:
            self.pool._release(self.slot)
            self.pool = None


class CompactPool:
    """One compact model shared by many live sessions, stepped for all of them in one batched call.

    Each session's front-end (`open`) owns a row ("slot") of one batched model state; rows are
    handed out lowest first, so live sessions stay packed at the front. When the rows being
    stepped are exactly the rows in use, the step runs on a view of the leading rows, including
    any free rows among them (their state is thrown away: a row is reset when handed out), with
    no copying; otherwise the rows are gathered, stepped and scattered back.
    """

    def __init__(self, checkpoint: str | Path | None = None, capacity: int = 8, threads: int = 1) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        torch.set_num_threads(threads)
        self.model, self.tokenizer, self.meta = _load(checkpoint)
        self.whole_words = whole_word_pieces(self.tokenizer)  # once for all of the pool's sessions
        self.capacity = capacity
        self.cache = self.model.new_state(capacity)
        self._free = list(range(capacity))
        self._used: set[int] = set()
        self._warm()

    def _warm(self) -> None:
        """One step on a row handed out and given back (a row is reset when handed out again): torch's
        first call costs 35 ms more than the next ones, and the first live session's first frame paid it
        (a 75 ms step, a deadline miss in a one-session loadtest)."""
        fe = self.open()
        try:
            silence = UserFrame(audio=np.zeros(FRAME_SAMPLES, np.float32), vad_prob=0.0, in_speech=False)
            self.step_many([fe], [silence], [self.tokenizer.pad_id])
        finally:
            fe.close()

    def open(self, tts: TTS | None = None) -> CompactFrontEnd:
        return CompactFrontEnd(tts=tts, pool=self)

    @property
    def in_use(self) -> int:
        return len(self._used)

    def _acquire(self) -> int:
        if not self._free:
            raise RuntimeError(f"all {self.capacity} front-end slots are in use")
        slot = min(self._free)
        self._free.remove(slot)
        self._used.add(slot)
        return slot

    def _release(self, slot: int) -> None:
        if slot in self._used:
            self._used.remove(slot)
            self._free.append(slot)

    def _view(self, n: int) -> dict[str, torch.Tensor]:
        return {key: (t[:, :n] if key in ("k", "v") else t[:n]) for key, t in self.cache.items()}

    def step_many(self, fes: list[CompactFrontEnd], users: list[UserFrame], tokens: list[int]) -> list[FrontEndOutput]:
        """One model step for several of this pool's front-ends (each at its own position)."""
        if not fes:
            return []
        slots = [fe.slot for fe in fes]
        if len(set(slots)) != len(slots):
            raise ValueError("a front-end can be stepped only once per frame")
        inputs = [fe.frame_input(u, t) for fe, u, t in zip(fes, users, tokens)]
        packed = set(slots) == self._used
        if packed:  # step the leading rows in place
            rows = slots
            cache = self._view(max(slots) + 1)
        else:  # gather the rows, step them, scatter them back
            rows = list(range(len(slots)))
            idx = torch.tensor(slots)
            cache = {key: t.index_select(1 if key in ("k", "v") else 0, idx) for key, t in self.cache.items()}
        toks = step(self.model, cache, rows, [fe.state for fe in fes], inputs)
        if packed:
            self.cache["pos"][:len(cache["pos"])] = cache["pos"]  # step() rebinds pos; the rest was updated in place
        else:
            for key, t in cache.items():
                self.cache[key].index_copy_(1 if key in ("k", "v") else 0, idx, t)
        return [fe.spoken(tok, u) for fe, tok, u in zip(fes, toks, users)]

__all__ = ["CompactFrontEnd", "CompactPool", "DEFAULT_CHECKPOINT", "MAX_LOOP_BLOCK", "SAMPLE_RATE", "completes_a_loop"]
