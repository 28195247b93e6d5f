"""The compact front-end at run time: one model step per frame, its text voiced just in time.

The model paces its words like speech (a word, then PAD frames for as long as the word takes to
say). A word is complete when the next word starts or a PAD follows; complete words go to the
voice as soon as the voice is about to run dry, so the first word is spoken at once and later
words are grouped into phrases with better prosody.

The first word of a response does not wait for the next frame to prove it complete when its one
piece is a whole English word ("The", "It", "Sorry"): that frame (80 ms) is a fifth of the onset
budget, and a first word that goes on ("The" + "o") is rare.
"""
from __future__ import annotations

from collections import deque
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ...audio import FRAME_SAMPLES, SAMPLE_RATE
from ...errors import FrontEndUnavailable
from ...frontend import FrontEndOutput, UserFrame
from ...tts import TTS, Voicer
from .decoding import TurnStart
from .streams import UserTokenQueue, vad_bucket
from .tokenizer import END, PAD

DEFAULT_CHECKPOINT = Path(__file__).parent / "assets" / "compact.pt"
REFILL_S = 0.25  # hand the voice more text when less than this much audio is left
BARGE_IN_FRAMES = 3  # user speech this long while the assistant talks stops the assistant
RESPONSE_GAP_FRAMES = 6  # this much silence before a word makes it the first word of a response
MAX_LOOP_BLOCK = 8  # tokens; longer repeats are rephrasings ("The capital of... sorry, the capital of...")


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


class CompactFrontEnd:
    """One conversation's front-end. Built alone it loads its own model; built from a
    `CompactPool` (`pool.open(tts)`) it shares the pool's model and keeps its model state in a
    row of the pool's batched state, so the pool can step many sessions in one model call."""

    name = "compact"

    def __init__(self, checkpoint: str | Path | None = None, tts: TTS | None = None, threads: int = 1,
                 pool: "CompactPool | None" = None) -> None:
        self.pool = pool
        if pool is None:
            torch.set_num_threads(threads)
            self.model, self.tokenizer, self.meta = _load(checkpoint)
            self.slot = 0
        else:
            self.model, self.tokenizer, self.meta = pool.model, pool.tokenizer, pool.meta
            self.slot = pool._acquire()
        self.voicer = Voicer(tts) if tts is not None else None
        self.whole_words = pool.whole_words if pool is not None else whole_word_pieces(self.tokenizer)
        self.reset()

    def reset(self) -> None:
        if self.pool is None:
            self.state = self.model.new_state(1)
        else:
            self.pool._reset_slot(self.slot)
        self.user_q = UserTokenQueue(self.tokenizer.encode, PAD)
        self.prev = PAD
        self.word: list[int] = []
        self.pending: list[str] = []
        self.user_run = 0
        self.quiet_run = RESPONSE_GAP_FRAMES
        self.emitted: deque[int] = deque(maxlen=4096)  # recent output tokens, for inspection and tests
        self.said: list[int] = []  # the current response's tokens, for the loop check
        self.looping = False  # a loop was cut: silence until the model itself chooses silence
        self.loops_stopped = 0
        self.turn_start = TurnStart()
        if self.voicer is not None:
            self.voicer.clear()

    def _flush_word(self) -> None:
        if self.word:
            self.pending.append(self.tokenizer.decode(self.word).strip())
            self.word = []

    def _inputs(self, user: UserFrame, oracle_token: int) -> tuple[list[int], int, int, int]:
        """This frame's model inputs: (user tokens, vad bucket, oracle token, previous output)."""
        self.user_q.update(user.transcript)
        return self.user_q.next(2), vad_bucket(user.vad_prob), int(oracle_token), self.prev

    def step(self, user: UserFrame, oracle_token: int) -> FrontEndOutput:
        if self.pool is not None:
            return self.pool.step_many([self], [user], [oracle_token])[0]
        u, vad, otok, prev = self._inputs(user, oracle_token)
        logp = self.model.step(self.state, torch.tensor([u]), torch.tensor([vad]),
                               torch.tensor([otok]), torch.tensor([prev]))
        return self._consume(self._choose(logp[0], user), user)

    def _choose(self, logp: torch.Tensor, user: UserFrame) -> int:
        """This frame's token from the model's distribution (greedy, but see `TurnStart`)."""
        return self.turn_start.choose(logp, user.vad_prob)

    def _consume(self, tok: int, user: UserFrame) -> FrontEndOutput:
        """The model chose `tok` for this frame: group it into words and voice them just in time."""
        if tok <= END:
            self.looping = False  # the model stopped by itself: it may speak again
        else:
            if self.quiet_run >= RESPONSE_GAP_FRAMES:  # a reply begins
                self.said = []
                # barge-in counts the user's speech since the reply began: the voice activity of the
                # turn it answers lags a frame or two, and would otherwise cut its first word
                self.user_run = 0
            if not self.looping and completes_a_loop(self.said, tok):
                self.looping = True
                self.loops_stopped += 1
            if self.looping:
                tok = PAD  # fed back as silence, so the model sees that it stopped
            else:
                self.said = self.said[-3 * MAX_LOOP_BLOCK:] + [tok]
        self.prev = tok
        self.emitted.append(tok)
        if tok <= END:
            self._flush_word()
            self.quiet_run += 1
        else:
            if self.tokenizer.starts_word(tok):
                self._flush_word()
            self.word.append(tok)
            if self.quiet_run >= RESPONSE_GAP_FRAMES and tok in self.whole_words:
                self._flush_word()  # the first word of a response goes to the voice at once
            self.quiet_run = 0
        self.user_run = self.user_run + 1 if user.in_speech and user.vad_prob > 0.5 else 0
        if self.voicer is None:
            texts, self.pending = ([" ".join(self.pending)] if self.pending else []), []
            return FrontEndOutput(np.zeros(FRAME_SAMPLES, np.float32), texts)
        if self.user_run >= BARGE_IN_FRAMES and self.voicer.busy:
            self.voicer.clear()
            self.pending = []
        if self.pending and self.voicer.remaining_s() < REFILL_S:
            self.voicer.say(" ".join(self.pending))
            self.pending = []
        audio, started = self.voicer.pull()
        return FrontEndOutput(audio, started)

    def step_batch(self, users: list[UserFrame], oracle_tokens: list[int]) -> list[FrontEndOutput]:
        return [self.step(u, t) for u, t in zip(users, oracle_tokens)]

    def close(self) -> None:
        if self.voicer is not None:
            self.voicer.close()
            self.voicer = None
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
        self.state = self.model.new_state(capacity)
        self._free = list(range(capacity))
        self._used: set[int] = set()

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

    def _reset_slot(self, slot: int) -> None:
        self.model.reset_state(self.state, slot)

    def _view(self, n: int) -> dict[str, torch.Tensor]:
        return {key: (t[:, :n] if key in ("k", "v") else t[:n]) for key, t in self.state.items()}

    def step_many(self, fes: list[CompactFrontEnd], users: list[UserFrame], tokens: list[int]) -> list[FrontEndOutput]:
        """One model step for several of this pool's front-ends (each at its own position)."""
        if not fes:
            return []
        slots = [fe.slot for fe in fes]
        if len(set(slots)) != len(slots):
            raise ValueError("a front-end can be stepped only once per frame")
        inputs = [fe._inputs(u, t) for fe, u, t in zip(fes, users, tokens)]
        packed = set(slots) == self._used
        if packed:  # step the leading rows in place
            size = max(slots) + 1
            rows = slots
            state = self._view(size)
        else:  # gather the rows, step them, scatter them back
            size = len(slots)
            rows = list(range(size))
            idx = torch.tensor(slots)
            state = {key: t.index_select(1 if key in ("k", "v") else 0, idx) for key, t in self.state.items()}
        user = torch.full((size, 2), PAD, dtype=torch.long)
        vad = torch.zeros(size, dtype=torch.long)
        oracle = torch.full((size,), PAD, dtype=torch.long)
        prev = torch.full((size,), PAD, dtype=torch.long)
        for r, (u, v, o, pr) in zip(rows, inputs):
            user[r, 0], user[r, 1] = u[0], u[1]
            vad[r], oracle[r], prev[r] = v, o, pr
        logp = self.model.step(state, user, vad, oracle, prev)
        if packed:
            self.state["pos"][:size] = state["pos"]  # step() rebinds pos; the rest was updated in place
        else:
            for key, t in state.items():
                self.state[key].index_copy_(1 if key in ("k", "v") else 0, idx, t)
        return [fe._consume(fe._choose(logp[r], u), u) for fe, r, u in zip(fes, rows, users)]


__all__ = ["CompactFrontEnd", "CompactPool", "DEFAULT_CHECKPOINT", "SAMPLE_RATE"]
