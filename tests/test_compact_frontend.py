"""The compact front-end's run-time text handling, with the model's choices scripted."""
import numpy as np
import torch

from tandem.frontend import UserFrame
from tandem.frontends.compact.frontend import CompactFrontEnd
from tandem.frontends.compact.tokenizer import PAD

SILENT = UserFrame(np.zeros(1920, np.float32), 0.02, False)


def scripted(fe: CompactFrontEnd, tokens: list[int]) -> list[list[str]]:
    """Step the front-end while its model emits `tokens`; the text pieces each step released."""
    it = iter(tokens)

    def step(state, user, vad, oracle, prev):
        logp = torch.full((1, fe.tokenizer.vocab_size), -30.0)
        logp[0, next(it)] = 0.0
        return logp

    fe.model.step = step
    return [fe.step(SILENT, PAD).text for _ in tokens]


def test_first_word_of_a_response_is_released_at_once_when_it_is_a_whole_word():
    fe = CompactFrontEnd()
    tok = fe.tokenizer
    the, cap = tok.encode("The")[0], tok.encode(" capital")
    assert the in fe.whole_words
    out = scripted(fe, [PAD] * 8 + [the] + cap + [PAD, PAD])
    assert out[8] == ["The"], "no frame spent proving the first word complete"
    later = [t for step in out[9:] for t in step]
    assert later == ["capital"]


def test_later_words_and_unknown_first_words_wait_for_the_word_to_end():
    fe = CompactFrontEnd()
    tok = fe.tokenizer
    name = tok.encode(" Zorblax")  # several pieces, not an English word
    assert len(name) > 1
    out = scripted(fe, [PAD] * 8 + name + [PAD, PAD])
    assert not any(out[8: 8 + len(name)])
    assert out[8 + len(name)] == ["Zorblax"]
