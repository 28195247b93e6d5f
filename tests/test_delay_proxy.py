"""The LLM delay proxy (a stand-in for a slower, bigger model) in front of the fake OpenAI server."""
import asyncio
import time

import httpx
import pytest

from fakes import FakeLLMBehaviour, FakeOpenAIServer, until
from tandem.llm.client import ChatClient, LLMConfig, LLMError
from tandem.llm.delay_proxy import DelayProxy, has_content, v1_base

MSG = [{"role": "user", "content": "What is the capital of France?"}]


async def timed_stream(url: str) -> tuple[list[float], str]:
    """Seconds from the request to each text delta, and the text."""
    client = ChatClient(LLMConfig(url=url, model="m"))
    t0 = time.perf_counter()
    times, text = [], ""
    try:
        async for d in client.stream(MSG):
            times.append(time.perf_counter() - t0)
            text += d
    finally:
        await client.aclose()
    return times, text


async def test_the_first_token_waits_delay_s_and_not_much_more():
    with FakeOpenAIServer() as fake, DelayProxy(fake.url, delay_s=0.6) as proxy:
        times, text = await timed_stream(proxy.url)
        assert text == "The answer is Paris."
        assert 0.6 <= times[0] < 0.6 + 0.3
        assert times[-1] - times[0] < 0.3  # no rate: the rest follows at the upstream's pace
        proxy.set(0.0)
        times, _ = await timed_stream(proxy.url)
        assert times[0] < 0.3  # the delay is read per request
    assert fake.completed == 2 and proxy.cut_short == 0


async def test_the_delay_is_a_time_to_first_token_not_added_to_the_upstreams():
    # max(0.8, 0.6) = 0.8 s, not 0.8 + 0.6 = 1.4 s: the two far enough apart that a fresh machine's first
    # request (once 0.77 s against 0.75 s with 0.5 and 0.3) cannot blur them
    with FakeOpenAIServer(FakeLLMBehaviour(first_token_delay_s=0.6)) as fake, DelayProxy(fake.url, delay_s=0.8) as proxy:
        times, _ = await timed_stream(proxy.url)
        assert 0.8 <= times[0] < 1.2


async def test_a_rate_paces_the_tokens_after_the_first():
    tokens = ["a", " b", " c", " d", " e", " f"]
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=tokens)) as fake, DelayProxy(fake.url, delay_s=0.2, rate=10.0) as proxy:
        times, text = await timed_stream(proxy.url)
    assert text == "a b c d e f"
    assert times[0] >= 0.2
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert 0.5 - 0.03 <= times[-1] - times[0] < 0.5 + 0.25  # 5 gaps of 1/10 s
    assert min(gaps) > 0.07


async def test_a_client_that_leaves_closes_the_upstream_stream():
    slow = FakeLLMBehaviour(tokens=[f" w{i}" for i in range(200)], token_delay_s=0.02)
    with FakeOpenAIServer(slow) as fake, DelayProxy(fake.url) as proxy:
        client = ChatClient(LLMConfig(url=proxy.url, model="m"))
        stream = client.stream(MSG)
        assert (await anext(stream)) == " w0"
        await stream.aclose()  # what the scheduler's cancel does
        await client.aclose()
        await until(lambda: fake.disconnects == 1, 3.0)
        assert fake.tokens_sent < 100 and fake.completed == 0
        await until(lambda: proxy.cut_short == 1, 3.0)


async def test_a_client_that_leaves_during_the_hold_closes_the_upstream_stream_at_once():
    slow = FakeLLMBehaviour(tokens=[f" w{i}" for i in range(200)], token_delay_s=0.02)
    with FakeOpenAIServer(slow) as fake, DelayProxy(fake.url, delay_s=3.0) as proxy:
        t0 = time.perf_counter()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(timed_stream(proxy.url), 0.3)  # a cancelled stream before its first token
        await until(lambda: fake.disconnects == 1, 2.0)
        assert time.perf_counter() - t0 < 2.0  # not when the hold would have ended (3 s)
        assert fake.completed == 0


async def test_non_streaming_requests_and_errors_pass_through_without_a_hold():
    with FakeOpenAIServer() as fake, DelayProxy(fake.url, delay_s=2.0) as proxy:
        body = {"model": "m", "messages": MSG, "stream": False}
        async with httpx.AsyncClient() as http:
            t0 = time.perf_counter()
            direct = await http.post(f"{fake.url}/chat/completions", json=body)
            via = await http.post(f"{proxy.url}/chat/completions", json=body)
            assert time.perf_counter() - t0 < 1.0
            assert via.status_code == 200 and via.content == direct.content
            missing = await http.get(f"{proxy.url}/models")
            assert missing.status_code == 404  # the fake has no /v1/models: its answer comes back as it is
        fake.behaviour.status = 503
        with pytest.raises(LLMError, match="HTTP 503"):
            await timed_stream(proxy.url)
    assert proxy.streams == 0


def test_upstream_url_forms_and_content_lines():
    assert v1_base("http://h:1") == v1_base("http://h:1/v1/") == v1_base("http://h:1/v1/chat/completions") == "http://h:1/v1"
    assert has_content(b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n')
    assert not has_content(b'data: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}\n')
    assert not has_content(b"data: [DONE]\n") and not has_content(b"\n")
