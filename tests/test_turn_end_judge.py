"""The turn-end judge against the real embedded LLM (llama.cpp's llama-server with SmolLM2-135M), and its
faults: a server with no `/completion`, one that is not there, one that is slow."""
import asyncio
import http.server
import threading
import time

import pytest

from tandem.llm.delay_proxy import DelayProxy
from tandem.llm.local_server import LocalLlamaServer
from tandem.llm.turn_end import TurnEndJudge, chatml
from tandem.turn.reading import UNSURE_END


def test_chatml_leaves_the_user_s_message_open():
    prompt = chatml(" Who wrote Hamlet? ")
    assert prompt.endswith("<|im_start|>user\nWho wrote Hamlet?") and "<|im_end|>" in prompt


def test_the_embedded_llm_reads_whole_questions_as_ends_and_fragments_as_going_on():
    async def judge_all(url, texts):
        judge = TurnEndJudge(url, timeout_s=5.0)
        try:
            return [await judge.p_end(t) for t in texts]
        finally:
            await judge.close()

    ends = ["Which planet is closest to the sun?", "What do you call a baby cat?", "Who wrote Hamlet?"]
    goes_on = ["Can you tell me?", "I'd like to book.", "I want to know."]
    with LocalLlamaServer() as srv:
        p = asyncio.run(judge_all(srv.url, ends + goes_on))
        # `tandem bench --llm-delay` puts the delay proxy in front: the judge's own endpoints pass through it
        with DelayProxy(srv.url, delay_s=2.0) as proxy:
            t0 = time.perf_counter()
            via = asyncio.run(judge_all(proxy.url, ends[:1] + goes_on[:1]))
            took = time.perf_counter() - t0
    assert all(x is not None and x >= UNSURE_END for x in p[:3]), p
    assert all(x is not None and x < UNSURE_END for x in p[3:]), p
    assert via == pytest.approx([p[0], p[3]], abs=1e-3) and took < 2.0, (via, took)


class _NoCompletion(http.server.BaseHTTPRequestHandler):
    delay_s = 0.0

    def do_POST(self):  # noqa: N802
        time.sleep(self.delay_s)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoCompletion)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


def test_a_server_without_the_endpoint_gives_no_answer_and_is_asked_no_more(server, caplog):
    async def go():
        judge = TurnEndJudge(f"http://127.0.0.1:{server.server_port}/v1")
        out = [await judge.p_end("Hello there."), await judge.p_end("Hello again.")]
        await judge.close()
        return judge, out
    judge, out = asyncio.run(go())
    assert out == [None, None] and judge.broken and judge.asked == 1
    assert "turn-end judge" in caplog.text


def test_a_slow_or_absent_server_counts_as_no_answer(server):
    _NoCompletion.delay_s = 0.5
    try:
        async def go(url):
            judge = TurnEndJudge(url, timeout_s=0.1)
            t0 = time.perf_counter()
            p = await judge.p_end("Hello there.")
            await judge.close()
            return p, time.perf_counter() - t0, judge.broken
        p, took, broken = asyncio.run(go(f"http://127.0.0.1:{server.server_port}/v1"))
        assert p is None and took < 0.4 and not broken, "late: no answer, and asked again next time"
    finally:
        _NoCompletion.delay_s = 0.0
    p, _, broken = asyncio.run(go("http://127.0.0.1:9/v1"))
    assert p is None and broken
