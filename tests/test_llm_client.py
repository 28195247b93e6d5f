import asyncio

import pytest

from fakes import FakeLLMBehaviour, FakeOpenAIServer, until
from tandem.llm.client import ChatClient, LLMConfig, LLMError, chat_endpoint, parse_sse_line
from tandem.llm.local_server import free_port

MSGS = [{"role": "user", "content": "capital of France?"}]


async def collect(client: ChatClient) -> str:
    return "".join([d async for d in client.stream(MSGS)])


def test_endpoint_normalisation():
    assert chat_endpoint("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_endpoint("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_endpoint("http://h:1/api/v1/chat/completions") == "http://h:1/api/v1/chat/completions"


def test_sse_parsing_edge_cases():
    assert parse_sse_line("") == ""
    assert parse_sse_line(": keep-alive") == ""
    assert parse_sse_line('data: {"choices": []}') == ""
    assert parse_sse_line('data: {"choices": [{"delta": {"role": "assistant"}}]}') == ""
    assert parse_sse_line('data: {"choices": [{"delta": {"content": "hi"}}]}') == "hi"
    with pytest.raises(LLMError, match="malformed JSON"):
        parse_sse_line("data: {oops")
    with pytest.raises(LLMError, match="not server-sent events"):
        parse_sse_line("<html>")
    with pytest.raises(LLMError, match="error mid-stream"):
        parse_sse_line('data: {"error": {"message": "boom"}}')


async def test_streams_deltas_and_sends_auth():
    with FakeOpenAIServer() as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m", api_key="k"))
        assert await collect(client) == "The answer is Paris."
        await client.aclose()
        body = srv.requests[0]["body"]
        assert body["stream"] is True and body["model"] == "m" and body["messages"] == MSGS


@pytest.mark.parametrize("behaviour, msg", [
    (FakeLLMBehaviour(status=503), "HTTP 503"),
    (FakeLLMBehaviour(garbage=True), "not server-sent events"),
    (FakeLLMBehaviour(error_after=2), "error mid-stream"),
])
async def test_faults_become_llm_errors(behaviour, msg):
    with FakeOpenAIServer(behaviour) as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m"))
        with pytest.raises(LLMError, match=msg):
            await collect(client)
        await client.aclose()


async def test_connection_dropped_midstream_is_an_error():
    with FakeOpenAIServer(FakeLLMBehaviour(drop_after=2, token_delay_s=0.01)) as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m"))
        with pytest.raises(LLMError):
            await collect(client)
        await client.aclose()


async def test_unreachable_server():
    client = ChatClient(LLMConfig(url=f"http://127.0.0.1:{free_port()}/v1", model="m"))
    with pytest.raises(LLMError, match="unreachable"):
        await collect(client)
    await client.aclose()


async def test_first_token_timeout():
    with FakeOpenAIServer(FakeLLMBehaviour(first_token_delay_s=2.0)) as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m", first_token_timeout_s=0.3, chunk_timeout_s=0.3))
        with pytest.raises(LLMError, match="timed out"):
            await collect(client)
        await client.aclose()


async def test_cancelling_a_stream_really_stops_the_request():
    tokens = [f" w{i}" for i in range(200)]
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=tokens, token_delay_s=0.01)) as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m"))
        got = []

        async def consume():
            async for d in client.stream(MSGS):
                got.append(d)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: srv.disconnects == 1)  # the server must see the client go away
        sent_at_cancel = srv.tokens_sent
        await asyncio.sleep(0.3)
        assert srv.tokens_sent == sent_at_cancel < 100, "the server must stop generating"
        assert srv.completed == 0
        await client.aclose()


async def test_a_stream_that_stalls_after_its_first_chunk_ends_within_the_chunk_timeout():
    # the first token comes at once, then the server goes quiet for far longer than chunk_timeout_s
    stall = FakeLLMBehaviour(tokens=["The", " answer"], token_delay_s=5.0)
    with FakeOpenAIServer(stall) as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m", first_token_timeout_s=20.0, chunk_timeout_s=0.3))
        got: list[str] = []
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(LLMError, match="stalled") as e:
            async for d in client.stream(MSGS):
                got.append(d)
        waited = asyncio.get_running_loop().time() - t0
        assert got == ["The"]
        assert waited < 2.0, f"the chunk timeout must bound a stall mid-stream (waited {waited:.1f} s)"
        assert "0.3" in str(e.value)
        await client.aclose()


async def test_a_slow_first_token_within_its_timeout_is_not_cut_by_the_chunk_timeout():
    slow_start = FakeLLMBehaviour(first_token_delay_s=0.6)
    with FakeOpenAIServer(slow_start) as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m", first_token_timeout_s=5.0, chunk_timeout_s=0.2))
        assert await collect(client) == "The answer is Paris."
        await client.aclose()


async def test_first_token_timeout_holds_even_when_the_chunk_timeout_is_longer():
    with FakeOpenAIServer(FakeLLMBehaviour(first_token_delay_s=3.0)) as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m", first_token_timeout_s=0.3, chunk_timeout_s=10.0))
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(LLMError, match="no first token within 0.3 s"):
            await collect(client)
        assert asyncio.get_running_loop().time() - t0 < 2.0
        await client.aclose()
