import torch

from tandem.frontends.compact.model import CompactConfig, CompactLM


def tiny(window=8, **kw):
    torch.manual_seed(0)
    return CompactLM(CompactConfig(vocab=64, d=32, layers=2, heads=2, window=window, **kw)).eval()


def inputs(B=2, T=20, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 64, (B, T, 2), generator=g), torch.randint(0, 8, (B, T), generator=g),
            torch.randint(0, 64, (B, T), generator=g), torch.randint(0, 64, (B, T), generator=g))


def test_streaming_steps_equal_the_full_forward_past_the_window():
    m = tiny(window=8)
    m.copy_since_reset = False  # the training forward lets the pointer see every oracle in the window
    user, vad, oracle, prev = inputs(T=30)
    with torch.no_grad():
        full = m(user, vad, oracle, prev)
    st = m.new_state(2)
    steps = torch.stack([m.step(st, user[:, t], vad[:, t], oracle[:, t], prev[:, t]) for t in range(30)], 1)
    assert torch.allclose(steps, full, atol=1e-4)


def test_batch_elements_are_isolated_and_can_be_reset_alone():
    m = tiny()
    user, vad, oracle, prev = inputs(B=2, T=12)
    st = m.new_state(2)
    for t in range(12):
        both = m.step(st, user[:, t], vad[:, t], oracle[:, t], prev[:, t])
    st1 = m.new_state(1)
    for t in range(12):
        one = m.step(st1, user[1:, t], vad[1:, t], oracle[1:, t], prev[1:, t])
    assert torch.allclose(both[1], one[0], atol=1e-5)
    m.reset_state(st, 0)
    assert int(st["pos"][0]) == 0 and int(st["pos"][1]) == 12


def test_output_is_a_distribution_with_and_without_the_copy_head():
    for copy in (True, False):
        m = tiny(copy_head=copy)
        with torch.no_grad():
            logp = m(*inputs())
        assert torch.allclose(logp.exp().sum(-1), torch.ones(logp.shape[:2]), atol=1e-3)


def test_copy_head_puts_mass_only_on_fed_oracle_tokens():
    m = tiny()
    with torch.no_grad():
        m.copy_gate.bias.fill_(50.0)  # force the pointer
        m.copy_gate.weight.zero_()
        user, vad, _, prev = inputs(B=1, T=6)
        oracle = torch.tensor([[0, 2, 10, 11, 0, 0]])
        logp = m(user, vad, oracle, prev)
    p = logp.exp()[0, 5]
    assert float(p[10] + p[11]) > 0.99


def test_same_seed_same_model():
    a, b = tiny(), tiny()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_pointer_follow_streaming_equals_forward_given_the_copies_it_tracked():
    """The step tracks which oracle frame each emitted token was copied from; the full forward with
    that same `last_src` gives the same output, past the window too."""
    m = tiny(window=8, pointer_follow=True)
    m.copy_since_reset = False  # as the training forward
    T = 30
    user, vad, oracle, _ = inputs(T=T)
    oracle = torch.where(torch.arange(T) % 3 == 0, torch.zeros_like(oracle), oracle)  # some PAD frames
    st = m.new_state(2)
    prev = torch.zeros(2, T, dtype=torch.long)
    last = torch.full((2, T), -1, dtype=torch.long)
    outs = []
    for t in range(T):
        logp = m.step(st, user[:, t], vad[:, t], oracle[:, t], prev[:, t])
        last[:, t] = st["last_src"]
        outs.append(logp)
        if t + 1 < T:  # its own output is fed back
            prev[:, t + 1] = torch.argmax(logp, -1)
    with torch.no_grad():
        full = m(user, vad, oracle, prev, last_src=last)
    assert torch.allclose(torch.stack(outs, 1), full, atol=1e-4)
    assert (last >= 0).any(), "some outputs were recognised as copies"


def test_pointer_follow_favours_the_frame_after_the_last_copy():
    m = tiny(pointer_follow=True)
    with torch.no_grad():
        m.follow_w.copy_(torch.tensor([20.0, 0.0]))
    user, vad, oracle, prev = inputs(B=1, T=10)
    oracle[:] = torch.tensor([[10, 11, 11, 11, 11, 12, 13, 14, 15, 16]])
    last = torch.full((1, 10), 2, dtype=torch.long)  # frame 2 was copied last
    with torch.no_grad():
        _, attn = m(user, vad, oracle, prev, last_src=last, return_attn=True)
    assert int(attn[0, 9].argmax()) == 3 and float(attn[0, 9, 3]) > 0.9


def test_streaming_pointer_copies_only_from_the_oracle_since_its_last_start():
    """A reset withdraws the oracle before it: an earlier answer (10, 11) is never read out for the
    new one (12, 13), however the pointer would favour it."""
    m = tiny()
    with torch.no_grad():
        m.copy_gate.bias.fill_(50.0)  # force the pointer
        m.copy_gate.weight.zero_()
        oracle = [2, 10, 11, 0, 2, 12, 13, 0]
        for since in (True, False):
            m.copy_since_reset = since
            st = m.new_state(1)
            for o in oracle:
                logp = m.step(st, torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, dtype=torch.long),
                              torch.tensor([o]), torch.zeros(1, dtype=torch.long))
            p = logp.exp()[0]
            if since:
                assert float(p[12] + p[13]) > 0.99 and float(p[10] + p[11]) < 1e-6
            else:
                assert float(p[10] + p[11]) > 0.01, "without the rule the old oracle is still in reach"
