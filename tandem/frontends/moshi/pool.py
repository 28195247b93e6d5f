"""Many sessions on one Moshi model: each session gets a batch slot of one `MoshiFrontEnd`.

This is the shape `tandem serve` wants (a provider with `open(tts)` and `step_many(...)`, see
tandem/server/shared.py): the 7B model is loaded once, every due session's frame goes through one
batched step, and slots whose session is not due this tick are masked (moshi's exec mask), so
their conversation does not move. Each session keeps its own `OracleStream`; the slot only carries
the token that stream chose for the frame.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...audio.frames import FRAME_SAMPLES
from ...runtime.errors import FrontEndUnavailable
from ...speak.frontend import FrontEndOutput, UserFrame
from .frontend import MoshiFrontEnd


class MoshiSlot:
    """One session's view of the shared model; behaves as a batch-size-1 FrontEnd."""

    name = "moshi"

    def __init__(self, pool: "MoshiPool", index: int) -> None:
        self.pool = pool
        self.index = index
        self.tokenizer = pool.fe.tokenizer
        self.closed = False

    def reset(self) -> None:
        self.pool.fe.reset_slot(self.index)

    def step(self, user: UserFrame, oracle_token: int) -> FrontEndOutput:
        return self.pool.step_many([self], [user], [oracle_token])[0]

    def step_batch(self, users: list[UserFrame], oracle_tokens: list[int]) -> list[FrontEndOutput]:
        if len(users) != 1:
            raise ValueError("a moshi slot is one session; batch sessions through MoshiPool.step_many")
        return [self.step(users[0], oracle_tokens[0])]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.release(self)


class MoshiPool:
    name = "moshi"

    def __init__(self, capacity: int, **factory_kwargs: Any) -> None:
        from . import make_front_end

        self.capacity = capacity
        self.fe: MoshiFrontEnd = make_front_end(batch_size=capacity, **factory_kwargs)
        self.fe.reset()
        self._free = list(range(capacity))
        self._silence = UserFrame(np.zeros(FRAME_SAMPLES, np.float32), 0.0, False)

    def open(self, tts: Any = None) -> MoshiSlot:
        if not self._free:
            raise FrontEndUnavailable(f"all {self.capacity} moshi slots are in use")
        slot = MoshiSlot(self, self._free.pop(0))
        slot.reset()
        return slot

    def release(self, slot: MoshiSlot) -> None:
        if slot.index not in self._free:
            self._free.append(slot.index)
            self._free.sort()

    def step_many(self, fes: list[Any], users: list[UserFrame], tokens: list[int]) -> list[FrontEndOutput]:
        """One frame for each slot in `fes`; the pool's other slots stand still."""
        pad = self.fe.tokenizer.pad_id
        all_users = [self._silence] * self.capacity
        all_tokens = [pad] * self.capacity
        active = [False] * self.capacity
        for slot, u, t in zip(fes, users, tokens):
            if slot.pool is not self or slot.closed:
                raise ValueError("step_many got a slot this pool did not open (or one already closed)")
            all_users[slot.index], all_tokens[slot.index], active[slot.index] = u, int(t), True
        outs = self.fe.step_batch(all_users, all_tokens, active)
        return [outs[slot.index] for slot in fes]

    def close(self) -> None:
        self.fe.close()
