"""Streaming chat completions over the OpenAI protocol (SSE), for any compatible server.

Closing the stream closes the HTTP connection, which is how servers (llama.cpp, vLLM, SGLang,
hosted APIs) learn that a superseded request should stop generating.

Two read deadlines: up to `first_token_timeout_s` for the first token (a cold model may take long),
then `chunk_timeout_s` for each later chunk (a stream that stalls mid-answer must end soon). One
httpx read timeout cannot be both, so reads are bounded with asyncio deadlines instead.
"""
from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, TypeVar

import httpx

from .outage import LLMOutage


class LLMError(Exception):
    """The LLM request failed; the message says how (unreachable, HTTP error, garbage, timeout)."""


class LLMUnavailable(LLMError):
    """The LLM server is not there now (refused, gone mid-request, 502-504): an outage, not a bad answer."""


# what a server says while it is away or still loading (a proxy in front of it, llama-server starting)
UNAVAILABLE_STATUS = (502, 503, 504)


@dataclass(frozen=True)
class LLMConfig:
    url: str
    model: str
    api_key: str | None = None
    max_tokens: int = 60
    temperature: float = 0.0
    connect_timeout_s: float = 3.0
    first_token_timeout_s: float = 20.0  # a cold hosted model may take long; the frame loop never waits for it
    chunk_timeout_s: float = 10.0  # between chunks once the first token came
    # the server goes on from a reply's first words given as the last (assistant) message, instead of
    # answering after it: llama.cpp's llama-server does (TANDEM_LLM_PREFILL=1 for one behind --llm-url);
    # OpenAI's API does not
    prefill: bool = False
    # llama.cpp's llama-server: its slots, each keeping the prompt it evaluated last. Above 0, a
    # conversation may be pinned to one (`id_slot`), so its next request goes on from its own prompt
    # instead of landing where another conversation was and evaluating its history again
    slots: int = 0

    @property
    def endpoint(self) -> str:
        return chat_endpoint(self.url)

    @classmethod
    def from_env(cls, url: str | None = None, model: str | None = None, **kw) -> "LLMConfig | None":
        url = url or os.environ.get("TANDEM_LLM_URL")
        if not url:
            return None
        return cls(url=url, model=model or os.environ.get("TANDEM_LLM_MODEL") or "default",
                   api_key=os.environ.get("TANDEM_LLM_API_KEY"),
                   prefill=os.environ.get("TANDEM_LLM_PREFILL", "").lower() in ("1", "true", "yes"), **kw)


def chat_endpoint(url: str) -> str:
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return url + "/chat/completions"
    return url + "/v1/chat/completions"


class ChatClient:
    """One shared connection pool; each `stream()` call is one request."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.outage = LLMOutage(config.endpoint)
        headers = {"Content-Type": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._http = httpx.AsyncClient(
            headers=headers,
            # read=None: `stream` bounds every read itself, with the deadline of its phase
            timeout=httpx.Timeout(config.chunk_timeout_s, connect=config.connect_timeout_s, read=None),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def stream(self, messages: list[dict[str, str]], max_tokens: int | None = None,
                     slot: int | None = None) -> AsyncIterator[str]:
        """Yield text deltas as they arrive. Raises LLMError (LLMUnavailable when the server is not there,
        which `outage` notes). Breaking out of the loop (or cancelling the task) closes the connection.
        `slot`: the server slot to serve it (LLMConfig.slots)."""
        try:
            async for delta in self._stream(messages, max_tokens, slot):
                yield delta
        except LLMUnavailable as e:
            self.outage.failed(str(e))
            raise

    async def _stream(self, messages: list[dict[str, str]], max_tokens: int | None, slot: int | None) -> AsyncIterator[str]:
        cfg = self.config
        body = {"model": cfg.model, "messages": messages, "stream": True,
                "max_tokens": max_tokens or cfg.max_tokens, "temperature": cfg.temperature}
        if slot is not None:
            body["id_slot"] = slot
        loop = asyncio.get_running_loop()
        first_deadline = loop.time() + cfg.first_token_timeout_s  # the response headers count against it
        no_first = f"LLM server at {cfg.endpoint} timed out: no first token within {cfg.first_token_timeout_s:g} s"
        stalled = f"LLM stream from {cfg.endpoint} stalled: no chunk for {cfg.chunk_timeout_s:g} s (timed out)"
        got_first = False
        try:
            request = self._http.build_request("POST", cfg.endpoint, json=body)
            resp = await _within(first_deadline, self._http.send(request, stream=True), no_first)
            try:
                if resp.status_code != 200:
                    raw = await _within(loop.time() + cfg.chunk_timeout_s, resp.aread(), stalled)
                    detail = raw[:200].decode("utf-8", "replace").strip()
                    kind = LLMUnavailable if resp.status_code in UNAVAILABLE_STATUS else LLMError
                    raise kind(f"LLM server answered HTTP {resp.status_code} at {cfg.endpoint}: {detail}")
                lines = resp.aiter_lines()
                while True:
                    # set before each read, not across the yield: the consumer's time is not the server's
                    deadline = loop.time() + cfg.chunk_timeout_s if got_first else first_deadline
                    line = await _within(deadline, anext(lines, None), stalled if got_first else no_first)
                    if line is None:
                        return
                    delta = parse_sse_line(line)
                    if delta is _DONE:
                        return
                    if delta:
                        if not got_first:
                            got_first = True
                            self.outage.answered()
                        yield delta
            finally:
                await resp.aclose()
        except httpx.ConnectError as e:
            raise LLMUnavailable(f"LLM server unreachable at {cfg.endpoint} ({e or 'connection refused'})") from None
        except httpx.ConnectTimeout:
            raise LLMUnavailable(f"LLM server at {cfg.endpoint} did not accept a connection within "
                                 f"{cfg.connect_timeout_s:g} s") from None
        except httpx.RemoteProtocolError as e:
            if got_first:
                raise LLMError(f"LLM stream from {cfg.endpoint} broke: {type(e).__name__}: {e}") from None
            raise LLMUnavailable(f"LLM server at {cfg.endpoint} closed the connection ({e})") from None
        except httpx.TimeoutException as e:
            raise LLMError(f"LLM server at {cfg.endpoint} timed out ({type(e).__name__})") from None
        except httpx.HTTPError as e:
            raise LLMError(f"LLM stream from {cfg.endpoint} broke: {type(e).__name__}: {e}") from None


_DONE = object()
_T = TypeVar("_T")


async def _within(deadline: float, aw: Awaitable[_T], message: str) -> _T:
    """`aw`, or LLMError(message) once the event loop's clock passes `deadline`."""
    try:
        async with asyncio.timeout_at(deadline):
            return await aw
    except TimeoutError:
        raise LLMError(message) from None


def parse_sse_line(line: str):
    """One SSE line -> text delta ('' for nothing), _DONE at the end; LLMError for garbage."""
    line = line.strip()
    if not line or line.startswith(":") or line.startswith("event:") or line.startswith("id:"):
        return ""
    if not line.startswith("data:"):
        raise LLMError(f"LLM server sent something that is not server-sent events: {line[:80]!r}")
    payload = line[5:].strip()
    if payload == "[DONE]":
        return _DONE
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        raise LLMError(f"LLM server sent malformed JSON in its stream: {payload[:80]!r}") from None
    if not isinstance(obj, dict):
        raise LLMError(f"LLM server sent an unexpected chunk: {payload[:80]!r}")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise LLMError(f"LLM server reported an error mid-stream: {str(msg)[:160]}")
    choices = obj.get("choices") or []
    if not choices:
        return ""
    delta = choices[0].get("delta") or {}
    content = delta.get("content")
    return content if isinstance(content, str) else ""
