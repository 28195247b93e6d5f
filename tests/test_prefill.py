"""The LLM goes on from the restated opening (LLMConfig.prefill, providers/llm.py): what is sent, how a
continued reply comes back whole, and the real llama-server doing it."""
import asyncio
import time

import pytest

from fakes import FakeLLMBehaviour, FakeOpenAIServer, until
from tandem.record import timeline as tl
from tandem.turn.conversation import Conversation
from tandem.llm.client import ChatClient, LLMConfig
from tandem.providers import LLMProvider
from tandem.providers.base import OracleRequest
from tandem.providers.llm import with_opening
from tandem.turn.scheduler import OracleScheduler, SchedulerConfig


async def _joined(opening: str, deltas: list[str]) -> list[str]:
    async def gen():
        for d in deltas:
            yield d

    return [d async for d in with_opening(opening, gen())]


@pytest.mark.parametrize("deltas, whole", [
    (["The capital of Peru is Lima", "."], "The capital of Peru is Lima."),  # llama-server: the opening comes back
    (["The capital", " of Peru is", " Lima."], "The capital of Peru is Lima."),  # ... in pieces
    ([" Lima", "."], "The capital of Peru is Lima."),  # only what follows it (vLLM's continue_final_message)
    (["Lima", "."], "The capital of Peru is Lima."),
    ([", I think, Lima."], "The capital of Peru is, I think, Lima."),
    (["The capital"], "The capital of Peru is"),  # ended inside the opening
    ([], ""),  # nothing: no answer, as from any provider
])
async def test_a_continued_reply_comes_back_whole(deltas, whole):
    assert "".join(await _joined("The capital of Peru is", deltas)) == whole


async def test_what_follows_the_opening_is_passed_on_as_it_comes():
    out = await _joined("The capital of Peru is", ["The capital of Peru is Lima", ",", " the city"])
    assert out == ["The capital of Peru is Lima", ",", " the city"], "no delta held back once the opening is through"


def _provider(prefill: bool) -> LLMProvider:
    return LLMProvider(ChatClient(LLMConfig(url="http://127.0.0.1:9", model="m", prefill=prefill)))


def test_the_opening_is_the_replys_beginning_only_for_a_server_that_continues_it():
    request = OracleRequest(turns=(), partial="What is the capital of Peru?", opening="The capital of Peru is")
    sent = _provider(True).messages(request)
    assert sent[-1] == {"role": "assistant", "content": "The capital of Peru is"}
    assert sent[-2] == {"role": "user", "content": "What is the capital of Peru?"}
    assert _provider(True).describe(request) == {"prompt": "What is the capital of Peru?",
                                                 "prefill": "The capital of Peru is"}
    assert _provider(False).messages(request)[-1]["role"] == "user", "OpenAI's API would answer after it"
    no_opening = OracleRequest(turns=(), partial="Tell me a joke.")
    assert _provider(True).messages(no_opening)[-1]["role"] == "user"
    with_passages = OracleRequest(turns=(), partial="What is the capital of Peru?", opening="The capital of Peru is",
                                  context=("Peru's capital is Lima.",))
    assert _provider(True).messages(with_passages)[-1]["role"] == "user", \
        "the documents may not say: no shape forced on the answer"


def test_the_prefill_setting_comes_from_the_environment_for_a_server_behind_a_url(monkeypatch):
    monkeypatch.setenv("TANDEM_LLM_PREFILL", "1")
    assert LLMConfig.from_env("http://127.0.0.1:8000/v1").prefill
    monkeypatch.delenv("TANDEM_LLM_PREFILL")
    assert not LLMConfig.from_env("http://127.0.0.1:8000/v1").prefill


def _scheduler(srv: FakeOpenAIServer, prefill: bool):
    t0 = time.perf_counter()
    timeline = tl.Timeline(lambda: time.perf_counter() - t0)
    emitted: list[tuple[str, str]] = []
    config = SchedulerConfig(restate=True, min_turn_words=2)
    provider = LLMProvider(ChatClient(LLMConfig(url=srv.url, model="m", prefill=prefill)), form=config.prompt_form)
    return OracleScheduler(provider, Conversation(), timeline, lambda k, t: emitted.append((k, t)), config), \
        timeline, emitted


async def test_the_llm_goes_on_from_the_opening_the_front_end_is_saying():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=[" Bangkok", "."], continues=True)) as srv:
        sched, timeline, emitted = _scheduler(srv, prefill=True)
        sched.on_final("What is the capital of Thailand?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert srv.requests[-1]["body"]["messages"][-1] == {"role": "assistant", "content": "The capital of Thailand is"}
        assert timeline.of_kind(tl.LLM_START)[-1]["prefill"] == "The capital of Thailand is"
        assert "".join(t for k, t in emitted if k == "append") == "The capital of Thailand is Bangkok."
        assert [k for k, _ in emitted].count("reset") == 1, "the reply continued the opening: nothing taken back"
        await sched.aclose()


async def test_a_short_spoken_opening_still_gives_the_llm_the_whole_one():
    """'It is' names no subject: SmolLM2 given it went on "It is the capital of Peru." (29 of 61 dev
    questions right, against 46 given the whole opening)."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=[" Lima", "."], continues=True)) as srv:
        sched, timeline, emitted = _scheduler(srv, prefill=True)
        sched.ttfts.extend([0.05] * 4)  # the LLM answers soon: the opening is said short
        sched.on_final("What is the capital of Peru?")
        assert timeline.of_kind(tl.RESTATE)[-1]["text"] == "It is"
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert srv.requests[-1]["body"]["messages"][-1]["content"] == "The capital of Peru is"
        assert "".join(t for k, t in emitted if k == "append") == "It is Lima."
        await sched.aclose()


async def test_without_prefill_the_request_ends_with_the_users_turn():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["The capital of Thailand is Bangkok."])) as srv:
        sched, timeline, emitted = _scheduler(srv, prefill=False)
        sched.on_final("What is the capital of Thailand?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert srv.requests[-1]["body"]["messages"][-1]["role"] == "user"
        assert "prefill" not in timeline.of_kind(tl.LLM_START)[-1]
        assert "".join(t for k, t in emitted if k == "append") == "The capital of Thailand is Bangkok."
        await sched.aclose()


@pytest.mark.parametrize("continues", [True, False])
async def test_a_partial_cut_off_mid_phrase_keeps_the_opening_for_an_llm_that_goes_on_from_it(continues):
    """"who wrote the play" is restated "The play was written by"; the next partial, "...Romeo and just...",
    stops mid-phrase and has no opening of its own. An LLM that continues a reply is given the one the
    front-end may already be saying; one that does not is asked afresh (the rule before)."""
    tokens = [" William", " Shakespeare", "."] if continues else ["Romeo and Juliet is by Shakespeare."]
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=tokens, continues=continues, first_token_delay_s=0.2)) as srv:
        sched, timeline, emitted = _scheduler(srv, prefill=continues)
        sched.on_partial("who wrote the play")
        assert timeline.of_kind(tl.RESTATE)[-1]["text"] == "The play was written by"
        await until(lambda: len(srv.requests) == 1)
        sched.on_partial("Who wrote the play Romeo and just...")
        await until(lambda: len(srv.requests) == 2)
        last = srv.requests[-1]["body"]["messages"][-1]
        if continues:
            assert last == {"role": "assistant", "content": "The play was written by"}
            await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
            assert "".join(t for k, t in emitted if k == "append") == "The play was written by William Shakespeare."
            assert [k for k, _ in emitted].count("reset") == 1, "nothing said was taken back"
        else:
            assert last["role"] == "user" and len(timeline.of_kind(tl.RESTATE)) == 1
        await sched.aclose()


@pytest.mark.slow
def test_the_embedded_llama_server_goes_on_from_the_opening():
    from tandem.llm.local_server import LocalLlamaServer

    async def ask(srv: LocalLlamaServer) -> list[str]:
        provider = LLMProvider(ChatClient(LLMConfig(url=srv.url, model=srv.model, prefill=srv.continues_replies)))
        request = OracleRequest(turns=(), partial="What is the capital of France?", opening="The capital of France is")
        try:
            return [d async for d in provider.answer(request)]
        finally:
            await provider.client.aclose()

    with LocalLlamaServer(parallel=2) as srv:
        assert srv.continues_replies
        deltas = asyncio.run(ask(srv))
    reply = "".join(deltas)
    assert reply.startswith("The capital of France is Paris"), reply
    assert "Paris" in deltas[0], "the answer word comes with the first token, not after the question restated"


@pytest.mark.slow
def test_the_embedded_llama_server_serves_a_session_in_the_slot_it_holds():
    from tandem.llm.local_server import LocalLlamaServer
    from tandem.server.shared import SharedLLM

    async def ask(srv: LocalLlamaServer) -> str:
        llm = SharedLLM(ChatClient(LLMConfig(url=srv.url, model=srv.model, slots=srv.parallel)), concurrency=2)
        first, second = llm.for_session(), llm.for_session()
        try:
            messages = [{"role": "user", "content": "What is the capital of France?"}]
            return "".join([d async for d in second.stream(messages, max_tokens=8)])
        finally:
            first.close()
            second.close()
            await llm.aclose()

    with LocalLlamaServer(parallel=2) as srv:
        reply = asyncio.run(ask(srv))
        log = srv._log_path.read_text()
    assert reply.strip()
    assert "selected slot by id (1)" in log, "the second session's request went to its slot, 1"


@pytest.mark.slow
def test_every_slot_of_the_embedded_llama_server_starts_with_the_system_prompt_cached():
    """A session holds a slot; the first question in a slot never used would evaluate the system prompt too."""
    import httpx

    from tandem.llm.local_server import LocalLlamaServer
    from tandem.llm.prompt import answer_messages

    with LocalLlamaServer(parallel=3) as srv:
        got = [httpx.post(f"{srv.url}/chat/completions", timeout=30, json={
            "model": srv.model, "max_tokens": 1, "temperature": 0.0, "id_slot": slot,
            "messages": answer_messages([], "What is the capital of France?")}).json() for slot in range(3)]
    evaluated = [g["timings"]["prompt_n"] for g in got]
    prompt = got[0]["usage"]["prompt_tokens"]
    assert max(evaluated) < prompt / 2, f"the slots evaluated {evaluated} of the prompt's {prompt} tokens: one was cold"
