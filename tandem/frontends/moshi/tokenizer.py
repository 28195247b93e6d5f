"""Moshi's SentencePiece text tokenizer, seen through tandem's `Tokenizer` protocol.

Oracle text is tokenised with the front-end's own tokenizer (KAME feeds the LLM's text through
Moshi's 32k SentencePiece model). The oracle stream's start token is the LM's text start id
(`text_card`, one past the vocabulary) and PAD is the LM's text padding id (3 in Moshi).
"""
from __future__ import annotations

from pathlib import Path

WORD_START = "\u2581"  # SentencePiece's word boundary marker


class MoshiTokenizer:
    def __init__(self, model: str | Path, start_id: int, pad_id: int = 3, end_pad_id: int = 0) -> None:
        import sentencepiece

        self.path = Path(model)
        self.sp = sentencepiece.SentencePieceProcessor()
        self.sp.Load(str(model))
        self.start_id = start_id
        self.pad_id = pad_id
        self.end_pad_id = end_pad_id  # Moshi marks the last PAD before a word with it; never spoken text
        self.vocab_size = self.sp.GetPieceSize()

    def encode(self, text: str) -> list[int]:
        return list(self.sp.EncodeAsIds(text))

    def decode(self, ids: list[int]) -> str:
        return self.sp.DecodeIds([i for i in ids if 0 <= i < self.vocab_size and not self.is_silent(i)])

    def is_silent(self, token: int) -> bool:
        """PAD, end-of-padding and the start token carry no text."""
        return token in (self.pad_id, self.end_pad_id, self.start_id)

    def piece(self, token: int) -> str | None:
        """The text a model token adds (a leading space at word starts), as Moshi's server prints it;
        None for tokens that carry no text."""
        if self.is_silent(token) or not 0 <= token < self.vocab_size:
            return None
        if self.sp.IsControl(token) or self.sp.IsUnknown(token):  # <s>, </s>, <unk>: not speech
            return None
        return self.sp.IdToPiece(token).replace(WORD_START, " ")
