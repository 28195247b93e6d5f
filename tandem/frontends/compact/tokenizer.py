"""The compact front-end's own SentencePiece tokenizer; oracle and user text are tokenised with it."""
from __future__ import annotations

import io
from pathlib import Path

PAD, UNK, START, END = 0, 1, 2, 3


class CompactTokenizer:
    pad_id = PAD
    start_id = START  # the oracle stream's start token, pinned at each reset

    def __init__(self, model: str | Path | bytes) -> None:
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor()
        if isinstance(model, bytes):
            self.sp.LoadFromSerializedProto(model)
            self.proto = model
        else:
            self.proto = Path(model).read_bytes()
            self.sp.LoadFromSerializedProto(self.proto)
        self.vocab_size = self.sp.GetPieceSize()
        self._word_start = [self.sp.IdToPiece(i).startswith("\u2581") for i in range(self.vocab_size)]

    def encode(self, text: str) -> list[int]:
        return self.sp.EncodeAsIds(text)

    def decode(self, ids: list[int]) -> str:
        return self.sp.DecodeIds([i for i in ids if i > END])

    def piece(self, i: int) -> str:
        return self.sp.IdToPiece(i)

    def starts_word(self, i: int) -> bool:
        return self._word_start[i] if 0 <= i < self.vocab_size else False

    @classmethod
    def from_sentences(cls, sentences: list[str], vocab_size: int = 1024) -> "CompactTokenizer":
        """A new SentencePiece BPE model learnt from `sentences` (the compact recipe's tokenizer)."""
        import sentencepiece as spm

        buf = io.BytesIO()
        spm.SentencePieceTrainer.Train(
            sentence_iterator=iter(sentences), model_writer=buf, vocab_size=vocab_size, model_type="bpe",
            pad_id=PAD, unk_id=UNK, bos_id=START, eos_id=END, byte_fallback=True, character_coverage=1.0,
            normalization_rule_name="identity", max_sentencepiece_length=8, split_digits=True,
            num_threads=2, minloglevel=2)
        return cls(buf.getvalue())
