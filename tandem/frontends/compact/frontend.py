"""The compact front-end at run time: one model step per frame, its text voiced just in time.

The model paces its words like speech (a word, then PAD frames for as long as the word takes to
say). A word is complete when the next word starts or a PAD follows; complete words go to the
voice as soon as the voice is about to run dry, so the first word is spoken at once and later
words are grouped into phrases with better prosody.
"""
from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import torch

from ...audio import FRAME_SAMPLES, SAMPLE_RATE
from ...errors import FrontEndUnavailable
from ...frontend import FrontEndOutput, UserFrame
from ...tts import TTS, Voicer
from .streams import UserTokenQueue, vad_bucket
from .tokenizer import END, PAD

DEFAULT_CHECKPOINT = Path(__file__).parent / "assets" / "compact.pt"
REFILL_S = 0.25  # hand the voice more text when less than this much audio is left
BARGE_IN_FRAMES = 3  # user speech this long while the assistant talks stops the assistant


class CompactFrontEnd:
    name = "compact"

    def __init__(self, checkpoint: str | Path | None = None, tts: TTS | None = None, threads: int = 1) -> None:
        from .train import load_checkpoint

        path = Path(checkpoint) if checkpoint else DEFAULT_CHECKPOINT
        if not path.exists():
            raise FrontEndUnavailable(f"compact front-end checkpoint not found at {path}; "
                                      f"train one with `tandem train compact`")
        torch.set_num_threads(threads)
        self.model, self.tokenizer, self.meta = load_checkpoint(path)
        self.voicer = Voicer(tts) if tts is not None else None
        self.reset()

    def reset(self) -> None:
        self.state = self.model.new_state(1)
        self.user_q = UserTokenQueue(self.tokenizer.encode, PAD)
        self.prev = PAD
        self.word: list[int] = []
        self.pending: list[str] = []
        self.user_run = 0
        self.emitted: deque[int] = deque(maxlen=4096)  # recent output tokens, for inspection and tests
        if self.voicer is not None:
            self.voicer.clear()

    def _flush_word(self) -> None:
        if self.word:
            self.pending.append(self.tokenizer.decode(self.word).strip())
            self.word = []

    def step(self, user: UserFrame, oracle_token: int) -> FrontEndOutput:
        self.user_q.update(user.transcript)
        u = torch.tensor([self.user_q.next(2)])
        logp = self.model.step(self.state, u, torch.tensor([vad_bucket(user.vad_prob)]),
                               torch.tensor([int(oracle_token)]), torch.tensor([self.prev]))
        tok = int(torch.argmax(logp, dim=-1)[0])
        self.prev = tok
        self.emitted.append(tok)
        if tok <= END:
            self._flush_word()
        else:
            if self.tokenizer.starts_word(tok):
                self._flush_word()
            self.word.append(tok)
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


__all__ = ["CompactFrontEnd", "DEFAULT_CHECKPOINT", "SAMPLE_RATE"]
