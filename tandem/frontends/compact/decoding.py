"""How the compact front-end turns its per-frame distribution into a token.

Greedy decoding, except for the moment a reply starts. Greedy decoding speaks only in a frame where
speaking is the single most likely outcome, so a model that spreads its wish to reply over several
frames (0.39, then 0.05, 0.12, 0.16...) after the user stops may never reply at all, although a
model sampled frame by frame would almost surely have started. `TurnStart` keeps, from the moment
the user's voice stops, the chance that the model would have started by now,
1 - prod(1 - p_speak), and starts the reply (the most likely word) once that reaches one half: the
median of the sampled start time, decided without randomness. It is armed by the user's speech and
disarmed by the model's first word, so it never restarts a reply the model ended, and it is reset
whenever the user speaks again, so pauses inside a turn start from zero.
"""
from __future__ import annotations

import torch

from .tokenizer import END

START_CHANCE = 0.5  # start the reply once the chance of having started since the user stopped reaches this
VOICE = 0.5  # voice-activity probability above which the user counts as speaking


class TurnStart:
    def __init__(self) -> None:
        self.armed = False  # the user has spoken and the model has not replied since
        self.chance = 0.0  # chance that the model would have started since the voice stopped

    def reset(self) -> None:
        self.armed = False
        self.chance = 0.0

    def choose(self, logp: torch.Tensor, vad_prob: float) -> int:
        """logp: [V] log-probabilities of this frame's token; returns the token to say."""
        tok = int(torch.argmax(logp))
        if vad_prob > VOICE:
            self.armed, self.chance = True, 0.0
            return tok
        if tok > END:
            self.reset()
            return tok
        if not self.armed:
            return tok
        p_speak = 1.0 - float(logp[: END + 1].exp().sum())
        self.chance = 1.0 - (1.0 - self.chance) * (1.0 - p_speak)
        if self.chance < START_CHANCE:
            return tok
        self.reset()
        return int(torch.argmax(logp[END + 1:])) + END + 1
