"""The Moshi front-end: user frame -> Mimi encode -> LM step with the frame's oracle token -> Mimi decode.

One `MoshiFrontEnd` steps a batch of B sessions at once (`step_batch`), each batch element with its
own streaming state and its own oracle token for the frame; the sessions' `OracleStream`s (one per
session, tandem/think/oracle.py) decide those tokens. `step` is the B = 1 case the Session calls.

Timing: at step k the LM hears user frame k and returns the text token and audio codes of frame
k - 1 (Moshi's acoustic delay), so the first step returns silence. A text piece is reported in the
frame whose audio it belongs to.
"""
from __future__ import annotations

import contextlib
import logging
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from ...audio.frames import FRAME_SAMPLES
from ...speak.frontend import FrontEndOutput, UserFrame
from ._deps import compile_guard
from .bundle import MoshiBundle

log = logging.getLogger(__name__)


@dataclass
class Sampling:
    """moshi's LMGen settings a checkpoint's `lm_gen_config` can carry (LMGen's defaults)."""

    temp: float = 0.8
    temp_text: float = 0.7
    top_k: int = 250
    top_k_text: int = 25
    use_sampling: bool = True
    cfg_coef: float = 1.0
    check: bool = False
    cfg_is_masked_until: list[int] | None = None
    cfg_is_no_text: bool = False


# LMGen arguments that are Python objects (a config file cannot carry them), and the one this
# front-end fixes: support_out_of_sync, so that each batch slot keeps its own clock (see __init__)
NOT_FROM_CONFIG = frozenset({"condition_tensors", "on_text_hook", "on_text_logits_hook", "on_audio_hook"})
FIXED = frozenset({"support_out_of_sync"})


def sampling_defaults(lm_gen_config: dict[str, Any]) -> dict[str, Any]:
    """The Sampling fields a checkpoint's lm_gen_config sets (moshi passes the whole dict to
    LMGen); anything LMGen would not take, or that cannot come from a file, is left out with a warning."""
    import inspect

    from moshi.models import LMGen

    accepted = set(inspect.signature(LMGen.__init__).parameters) - {"self", "lm_model"}
    fields = set(Sampling.__dataclass_fields__)
    out: dict[str, Any] = {}
    for key, value in lm_gen_config.items():
        if key in fields:
            out[key] = value
        elif key in FIXED:
            log.debug("lm_gen_config %s=%r: this front-end always sets it to True", key, value)
        elif key in accepted:
            log.warning("lm_gen_config %s=%r ignored: LMGen takes a Python object there, not a value from a file",
                        key, value)
        else:
            log.warning("lm_gen_config %s=%r ignored: moshi's LMGen has no such argument", key, value)
    return out


class MoshiFrontEnd:
    name = "moshi"

    def __init__(self, bundle: MoshiBundle, batch_size: int = 1, sampling: Sampling | None = None,
                 seed: int | None = None, history: int = 4096, cpu_threads: int | None = 1) -> None:
        from moshi.models import LMGen

        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if bundle.device.type == "cpu" and cpu_threads:
            # as the compact front-end does: the frame loop shares the CPU with the Listener process,
            # and torch's thread pool spinning on every core makes each step slower, not faster
            torch.set_num_threads(cpu_threads)
        self.bundle = bundle
        self.tokenizer = bundle.tokenizer
        self.batch_size = batch_size
        self.sampling = sampling or Sampling()
        self.seed = seed
        lm = bundle.lm
        if getattr(lm, "_tandem_owner", None) is not None:
            raise RuntimeError("this Moshi model is already stepping another front-end; one model serves many "
                               "sessions through one front-end's batch slots (batch_size), not several front-ends")
        # The oracle tokens of the current step, [B, 1], updated in place (see model.py on CUDA graphs).
        self._oracle = torch.full((batch_size, 1), self.tokenizer.pad_id, dtype=torch.long, device=bundle.device)
        s = self.sampling
        # support_out_of_sync: each slot has its own clock (moshi's default returns None for the whole
        # batch while *any* reset is fresh, so resetting one session would silence the others for a frame)
        self.gen = LMGen(lm, **asdict(s), support_out_of_sync=True)
        self._stack: contextlib.ExitStack | None = None
        # moshi's exec masks as last set (all slots running): Mimi's and the LM's, set only on change
        self._mask: dict[str, tuple[bool, ...]] = {"mimi": (True,) * batch_size, "lm": (True,) * batch_size}
        self.frame = 0
        # what each step fed and produced, bounded: for the timeline, tests and debugging
        self.fed_oracle: deque[list[int]] = deque(maxlen=history)
        self.emitted: deque[list[int]] = deque(maxlen=history)

    # -- streaming state ----------------------------------------------------------------------------
    def _compile_guard(self) -> contextlib.AbstractContextManager:
        return compile_guard(self.bundle.device)

    def _ensure_streaming(self) -> None:
        if self._stack is not None:
            return
        lm = self.bundle.lm
        if getattr(lm, "_tandem_owner", None) not in (None, self):
            raise RuntimeError("this Moshi model is already stepping another front-end")
        stack = contextlib.ExitStack()
        stack.enter_context(self.bundle.mimi.streaming(self.batch_size))
        stack.enter_context(self.gen.streaming(self.batch_size))
        lm.attach_oracle(self._oracle)
        lm._tandem_owner = self
        self._stack = stack
        self._mask = {"mimi": (True,) * self.batch_size, "lm": (True,) * self.batch_size}  # fresh state: all run

    def reset(self) -> None:
        """A new conversation in every batch slot."""
        if self.seed is not None:
            torch.manual_seed(self.seed)
        self._ensure_streaming()
        self.bundle.mimi.reset_streaming()
        self.gen.reset_streaming()
        self._mask = {"mimi": (True,) * self.batch_size, "lm": (True,) * self.batch_size}  # a reset runs all
        self._oracle.fill_(self.tokenizer.pad_id)
        self.frame = 0
        self.fed_oracle.clear()
        self.emitted.clear()

    def reset_slot(self, i: int) -> None:
        """A new conversation in batch slot i only; the other slots carry on."""
        self._ensure_streaming()
        mask = torch.zeros(self.batch_size, dtype=torch.bool, device=self.bundle.device)
        mask[i] = True
        self.bundle.mimi.reset_streaming(mask)
        self.gen.reset_streaming(mask)
        # moshi's reset also switches the slot's exec mask back on: keep our record of the masks true
        for k, m in self._mask.items():
            self._mask[k] = tuple(True if j == i else on for j, on in enumerate(m))

    def close(self) -> None:
        if self._stack is not None:
            self.bundle.lm.attach_oracle(None)
            self.bundle.lm._tandem_owner = None
            self._stack.close()
            self._stack = None

    def __enter__(self) -> "MoshiFrontEnd":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- stepping -----------------------------------------------------------------------------------
    def step(self, user: UserFrame, oracle_token: int) -> FrontEndOutput:
        if self.batch_size != 1:
            raise RuntimeError(f"step() is for batch_size 1; this front-end has {self.batch_size} slots, use step_batch")
        return self.step_batch([user], [oracle_token])[0]

    def step_batch(self, users: list[UserFrame], oracle_tokens: list[int],
                   active: list[bool] | None = None) -> list[FrontEndOutput]:
        """One frame for every slot. `active` (default: all) marks the slots whose conversation moves
        on: the others' streaming state is left as it was (moshi's exec mask) and they get silence."""
        B = self.batch_size
        if len(users) != B or len(oracle_tokens) != B:
            raise ValueError(f"step_batch needs exactly {B} frames and {B} oracle tokens, "
                             f"got {len(users)} and {len(oracle_tokens)}")
        top = self.bundle.lm.text_initial_token_id
        toks = [int(t) for t in oracle_tokens]
        bad = [t for t in toks if not -1 <= t <= top]
        if bad:
            raise ValueError(f"oracle tokens {bad} are outside the text vocabulary (0..{top}, or -1 for none)")
        self._ensure_streaming()
        dev = self.bundle.device
        pcm = np.stack([_frame(u.audio) for u in users])
        mask = tuple(bool(a) for a in active) if active is not None else (True,) * B
        if len(mask) != B:
            raise ValueError(f"active needs {B} flags, got {len(mask)}")
        with torch.no_grad(), self._compile_guard():
            self._set_mask("mimi", mask)
            codes = self.bundle.mimi.encode(torch.from_numpy(pcm)[:, None, :].to(dev))
            self._oracle.copy_(torch.tensor(toks, dtype=torch.long).view(B, 1))
            self._set_mask("lm", mask)
            out = self.gen.step(codes)
            self.fed_oracle.append(toks)
            self.frame += 1
            # a slot has output once its acoustic delay has passed; masked slots come back as moshi's
            # "ungenerated" id (-2). Only slots with output advance Mimi's decoder.
            text = out[:, 0, 0].tolist()
            ready = tuple(m and t >= 0 for m, t in zip(mask, text))
            audio = None
            if any(ready):
                self._set_mask("mimi", ready)
                audio = self.bundle.mimi.decode(out[:, 1:].clamp(min=0)).float().cpu().numpy()[:, 0, :]
        self.emitted.append([t if r else -1 for t, r in zip(text, ready)])
        res = []
        for i in range(B):
            if not ready[i] or audio is None:
                res.append(FrontEndOutput(np.zeros(FRAME_SAMPLES, np.float32), []))
                continue
            piece = self.tokenizer.piece(text[i])
            res.append(FrontEndOutput(np.ascontiguousarray(audio[i, :FRAME_SAMPLES], dtype=np.float32),
                                      [piece] if piece else []))
        return res

    def _set_mask(self, which: str, mask: tuple[bool, ...]) -> None:
        if self._mask[which] != mask:
            m = torch.tensor(mask, dtype=torch.bool, device=self.bundle.device)
            (self.bundle.mimi if which == "mimi" else self.gen).set_exec_mask(m)
            self._mask[which] = mask

    def said(self, slot: int = 0) -> str:
        """The text this slot has said so far (within the bounded history)."""
        return self.tokenizer.decode([step[slot] for step in self.emitted if step[slot] >= 0])


def _frame(audio: np.ndarray) -> np.ndarray:
    a = np.asarray(audio, dtype=np.float32).reshape(-1)
    if a.shape[0] != FRAME_SAMPLES:
        raise ValueError(f"a user frame is {FRAME_SAMPLES} samples at 24 kHz, got {a.shape[0]}")
    return a

