"""The compact front-end model: a frame-synchronous causal transformer over four summed input
streams (user tokens, voice activity, oracle token, own previous output), predicting the next
output text token, with a copy head that points at oracle tokens it has been fed.

With `pointer_follow`, the copy pointer gets a learned bonus for the oracle frames just after the
one it copied last, so it reads an oracle in order instead of finding its place by content alone
(names split into pieces such as "O t t aw a" repeat pieces, and the same answer often arrives twice).

Training runs `forward` over whole sequences; inference runs `step` one 80 ms frame at a time for
a batch of sessions, each with its own position, on ring-buffer KV caches of `window` frames, so
a conversation can go on past the training length.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .tokenizer import END, START


@dataclass
class CompactConfig:
    vocab: int = 1024
    d: int = 192
    layers: int = 4
    heads: int = 4
    window: int = 192
    vad_buckets: int = 8
    user_slots: int = 2
    copy_head: bool = True
    pointer_follow: bool = False  # bonus for the frames after the last copied one (off in old checkpoints)

    def to_dict(self) -> dict:
        return asdict(self)


def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x: [..., T, hd]; pos: broadcastable to [..., T] (float)."""
    hd = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd))
    ang = pos.unsqueeze(-1) * inv
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, c: CompactConfig) -> None:
        super().__init__()
        self.h = c.heads
        self.n1 = nn.RMSNorm(c.d)
        self.qkv = nn.Linear(c.d, 3 * c.d, bias=False)
        self.proj = nn.Linear(c.d, c.d, bias=False)
        self.n2 = nn.RMSNorm(c.d)
        self.mlp = nn.Sequential(nn.Linear(c.d, 4 * c.d, bias=False), nn.GELU(), nn.Linear(4 * c.d, c.d, bias=False))

    def _qkv(self, x: torch.Tensor, pos: torch.Tensor):
        B, T, D = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        p = pos[:, None, :].float()
        return rope(q, p), rope(k, p), v

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self._qkv(x, pos)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.n2(x))

    def step(self, x: torch.Tensor, pos: torch.Tensor, cache_k, cache_v, valid: torch.Tensor, slot: torch.Tensor):
        """x: [B,1,D]; writes this frame's k, v into the ring at `slot`, attends over valid entries."""
        B, _, D = x.shape
        q, k, v = self._qkv(x, pos[:, None])
        idx = slot.view(B, 1, 1, 1).expand(B, self.h, 1, D // self.h)
        cache_k.scatter_(2, idx, k)
        cache_v.scatter_(2, idx, v)
        a = F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=valid[:, None, None, :])
        x = x + self.proj(a.transpose(1, 2).reshape(B, 1, D))
        return x + self.mlp(self.n2(x))


class CompactLM(nn.Module):
    def __init__(self, c: CompactConfig) -> None:
        super().__init__()
        self.c = c
        # streaming: the pointer copies only from the oracle fed since the stream's last START; a reset
        # withdraws the oracle before it (an earlier question's answer must not be read out for this one)
        self.copy_since_reset = True
        self.emb_out = nn.Embedding(c.vocab, c.d)
        self.emb_oracle = nn.Embedding(c.vocab, c.d)
        self.emb_user = nn.ModuleList(nn.Embedding(c.vocab, c.d) for _ in range(c.user_slots))
        self.emb_vad = nn.Embedding(c.vad_buckets, c.d)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = nn.RMSNorm(c.d)
        self.head = nn.Linear(c.d, c.vocab, bias=False)
        if c.copy_head:
            self.copy_q = nn.Linear(c.d, c.d, bias=False)
            self.copy_k = nn.Linear(c.d, c.d, bias=False)
            self.copy_gate = nn.Linear(c.d, 1)
        self.apply(self._init)
        if c.copy_head and c.pointer_follow:
            self.follow_w = nn.Parameter(torch.tensor([3.0, 1.0]))  # frames last+1, last+2

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def embed(self, user, vad, oracle, prev) -> torch.Tensor:
        x = self.emb_out(prev) + self.emb_oracle(oracle) + self.emb_vad(vad)
        for i, emb in enumerate(self.emb_user):
            x = x + emb(user[..., i])
        return x

    def _follow(self, key_pos: torch.Tensor, last_src: torch.Tensor) -> torch.Tensor | None:
        """Pointer bonus [B,T,S]: key_pos [B,1|T,S] frame positions of the keys; last_src [B,T] the frame
        copied last (-1: none)."""
        if not (self.c.copy_head and self.c.pointer_follow):
            return None
        rel = key_pos - last_src[..., None]
        known = last_src[..., None] >= 0
        return ((rel == 1) & known) * self.follow_w[0] + ((rel == 2) & known) * self.follow_w[1]

    def _mix(self, h: torch.Tensor, keys: torch.Tensor, oracle_ids: torch.Tensor, allowed: torch.Tensor,
             follow: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p over the vocabulary from the head and the copy pointer, and the pointer's attention.
        h: [B,T,D]; keys: [B,S,D]; oracle_ids: [B,S]; allowed: [B,T,S] bool (causal, in window, an
        oracle content token); follow: [B,T,S] pointer bonus or None."""
        logp_vocab = F.log_softmax(self.head(h), dim=-1)
        if not self.c.copy_head:
            return logp_vocab, None
        scores = (self.copy_q(h) @ self.copy_k(keys).transpose(1, 2)) / math.sqrt(h.shape[-1])
        if follow is not None:
            scores = scores + follow
        scores = scores.masked_fill(~allowed, float("-inf"))
        any_ok = allowed.any(-1, keepdim=True)
        attn = torch.softmax(scores.masked_fill(~any_ok, 0.0), dim=-1) * any_ok
        B, T, S = attn.shape
        p_copy = torch.zeros(B, T, self.c.vocab, dtype=h.dtype, device=h.device)
        p_copy.scatter_add_(2, oracle_ids[:, None, :].expand(B, T, S), attn)
        g = torch.sigmoid(self.copy_gate(h)) * any_ok
        p = g * p_copy + (1 - g) * logp_vocab.exp()
        return torch.log(p.clamp_min(1e-9)), attn

    def forward(self, user, vad, oracle, prev, last_src=None, return_attn: bool = False):
        """All [B,T] (user [B,T,slots]); last_src [B,T]: the frame whose oracle token was copied last
        before each frame (-1: none), used with `pointer_follow`. Returns log-probs [B,T,V] of the output
        token at each frame (and the pointer's attention [B,T,T] with `return_attn`)."""
        B, T = prev.shape
        pos = torch.arange(T, device=prev.device).expand(B, T)
        i = torch.arange(T, device=prev.device)
        mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - self.c.window)
        x = self.embed(user, vad, oracle, prev)
        for blk in self.blocks:
            x = blk(x, pos, mask)
        h = self.norm(x)
        allowed = mask[None] & (oracle > END)[:, None, :]
        follow = self._follow(i.view(1, 1, T), last_src) if last_src is not None else None
        logp, attn = self._mix(h, h, oracle, allowed, follow)
        return (logp, attn) if return_attn else logp

    # -- streaming ----------------------------------------------------------------------------
    def new_state(self, batch: int) -> dict[str, torch.Tensor]:
        c = self.c
        hd = c.d // c.heads
        return {
            "k": torch.zeros(c.layers, batch, c.heads, c.window, hd),
            "v": torch.zeros(c.layers, batch, c.heads, c.window, hd),
            "h": torch.zeros(batch, c.window, c.d),
            "oracle": torch.zeros(batch, c.window, dtype=torch.long),
            "slot_pos": torch.full((batch, c.window), -1, dtype=torch.long),
            "pos": torch.zeros(batch, dtype=torch.long),
            "last_src": torch.full((batch,), -1, dtype=torch.long),  # frame copied last
            "attn": torch.zeros(batch, c.window),  # the pointer's attention at the previous step
            "copied_w": torch.zeros(batch),  # the pointer's weight on the frame `prev` was copied from (0: not copied)
            "reset_pos": torch.full((batch,), -1, dtype=torch.long),  # frame of the oracle stream's last START
        }

    @staticmethod
    def reset_state(state: dict[str, torch.Tensor], b: int) -> None:
        for key in ("k", "v"):
            state[key][:, b].zero_()
        state["h"][b].zero_()
        state["oracle"][b].zero_()
        state["slot_pos"][b].fill_(-1)
        state["pos"][b] = 0
        state["last_src"][b] = -1
        state["attn"][b].zero_()
        state["copied_w"][b] = 0.0
        state["reset_pos"][b] = -1

    @torch.no_grad()
    def step(self, state: dict[str, torch.Tensor], user, vad, oracle, prev) -> torch.Tensor:
        """One frame for B sessions: user [B,slots], vad/oracle/prev [B]. Returns log-probs [B,V]."""
        pos = state["pos"].clone()
        slot = pos % self.c.window
        B = pos.shape[0]
        # `prev` was copied from the oracle frame the pointer favoured among those holding it
        match = state["attn"] * ((state["oracle"] == prev[:, None]) & (prev[:, None] > END))
        best = match.argmax(-1)
        weight = match.gather(1, best[:, None])[:, 0]
        copied = weight > 0
        state["copied_w"].copy_(weight)
        # state is updated in place: a caller may step a view of a larger batched state
        state["last_src"].copy_(torch.where(copied, state["slot_pos"].gather(1, best[:, None])[:, 0], state["last_src"]))
        state["slot_pos"].scatter_(1, slot[:, None], pos[:, None])
        sp = state["slot_pos"]
        valid = (sp >= 0) & (sp > pos[:, None] - self.c.window) & (sp <= pos[:, None])
        x = self.embed(user[:, None, :], vad[:, None], oracle[:, None], prev[:, None])
        for li, blk in enumerate(self.blocks):
            x = blk.step(x, pos, state["k"][li], state["v"][li], valid, slot)
        h = self.norm(x)  # [B,1,D]
        state["h"].scatter_(1, slot.view(B, 1, 1).expand(B, 1, self.c.d), h)
        state["oracle"].scatter_(1, slot[:, None], oracle[:, None])
        allowed = valid & (state["oracle"] > END)
        if self.copy_since_reset:
            state["reset_pos"].copy_(torch.where(oracle == START, pos, state["reset_pos"]))
            allowed = allowed & (sp > state["reset_pos"][:, None])
        allowed = allowed[:, None, :]
        follow = self._follow(sp[:, None, :], state["last_src"][:, None])
        logp, attn = self._mix(h, state["h"], state["oracle"], allowed, follow)
        if attn is not None:
            state["attn"].copy_(attn[:, 0])
        state["pos"].add_(1)
        return logp[:, 0]
