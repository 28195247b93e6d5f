"""A loopback proxy that makes any OpenAI-compatible server look like a slower one.

Stand-in for a bigger model: a larger LLM mostly costs time before its first token (prefill,
queueing on a busy GPU) and a lower token rate after it. The proxy forwards `/v1/*` to the upstream
server (and any other path to the server's root) and, for streaming chat completions, holds the first content chunk until `delay_s` after the
request arrived (so the first token comes at max(upstream's own, delay_s): a time to first token of
`delay_s` on a fast upstream) and, with `rate`, releases later content chunks no faster than `rate`
per second. Everything else (non-streaming requests, other paths, error answers) passes through.

It runs on its own thread and event loop, never on a session's: a hold must not stall a frame loop.
A client that goes away (the scheduler cancelling a superseded stream) closes the upstream request
at once, during a hold too (the handler is cancelled on disconnect): the embedded llama.cpp server
serves one request at a time, so a leaked upstream request would delay the next stream.
"""
from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
from aiohttp import web

# request headers worth forwarding; Host, Content-Length and hop-by-hop headers are the proxy's own
_FORWARD = ("authorization", "content-type", "accept")


def v1_base(url: str) -> str:
    """The upstream's `.../v1` base from any form the LLM options accept (base, /v1, full endpoint)."""
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        url = url[: -len("/chat/completions")]
    return url if url.endswith("/v1") else url + "/v1"


def wants_stream(body: bytes) -> bool:
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(obj, dict) and obj.get("stream") is True


def has_content(line: bytes) -> bool:
    """Whether one SSE line carries text: only those are held or paced (role and stop chunks are not tokens)."""
    if not line.startswith(b"data:"):
        return False
    try:
        obj = json.loads(line[5:])
        content = obj["choices"][0]["delta"].get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return False
    return isinstance(content, str) and content != ""


class DelayProxy:
    """`with DelayProxy(upstream_url, delay_s=1.0) as p:` point the client at `p.url`.

    `delay_s` and `rate` may be changed between requests (`set`); each request uses the values
    it found on arrival."""

    def __init__(self, upstream: str, delay_s: float = 0.0, rate: float | None = None) -> None:
        self.upstream = v1_base(upstream)
        self.delay_s = delay_s
        self.rate = rate
        self.port = 0
        self.streams = 0  # streaming requests forwarded
        self.cut_short = 0  # of which ended before the upstream's end (the client left): upstream request closed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="llm-delay-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def set(self, delay_s: float, rate: float | None = None) -> None:
        self.delay_s, self.rate = delay_s, rate

    def __enter__(self) -> "DelayProxy":
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"the LLM delay proxy did not start: {self._error}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            app = web.Application(client_max_size=16 * 2**20)
            # every path: the OpenAI API under /v1, and a llama.cpp server's own (`/tokenize`, `/completion`: the
            # turn-end judge's, llm/turn_end.py), which were a 404 and left the judge off in every delayed run
            app.router.add_route("*", "/{tail:.*}", self._forward)
            # handler_cancellation: a client leaving during a hold cancels the handler, which
            # closes the upstream request; without it the proxy would notice only at its next write
            self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._session = loop.run_until_complete(self._open_session())
        except BaseException as e:  # noqa: BLE001 - reported by __enter__
            self._error = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _open_session(self) -> aiohttp.ClientSession:
        # no read deadline: the session's client bounds its own reads; the proxy only forwards
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))  # bodies decompressed: only Content-Type goes back

    async def _shutdown(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        loop = asyncio.get_running_loop()
        body = await request.read()
        arrived = loop.time()
        delay_s, rate = self.delay_s, self.rate  # this request's settings, whatever changes later
        url = f"{self.upstream.removesuffix('/v1')}/{request.match_info['tail']}"
        if request.query_string:
            url += "?" + request.query_string
        headers = {k: v for k, v in request.headers.items() if k.lower() in _FORWARD}
        streaming = request.method == "POST" and wants_stream(body)
        async with self._session.request(request.method, url, data=body or None, headers=headers) as up:
            ctype = up.headers.get("Content-Type", "application/octet-stream")
            if not streaming or up.status != 200:
                return web.Response(status=up.status, body=await up.read(), headers={"Content-Type": ctype})
            self.streams += 1
            resp = web.StreamResponse(headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
            released = 0  # content chunks sent on
            first_at = arrived
            finished = False
            try:
                await resp.prepare(request)
                async for line in up.content:  # one SSE line at a time
                    if has_content(line):
                        due = arrived + delay_s if released == 0 else (first_at + released / rate if rate else 0.0)
                        if due > loop.time():
                            await asyncio.sleep(due - loop.time())
                        if released == 0:
                            first_at = loop.time()
                        released += 1
                    await resp.write(line)
                    # the whole reply is out: a client that closes now, before the upstream's end of stream
                    # (and the handler is cancelled), left nothing unread (a test saw it counted as cut short)
                    finished = finished or line.strip() == b"data: [DONE]"
                finished = True
                await resp.write_eof()
            except ConnectionResetError:
                pass  # the client left before, between or after the writes: nothing to report to anyone
            finally:
                if not finished:
                    # the client left (cancelled handler or a failed write): drop the upstream
                    # connection, not back into the pool, so the server stops generating
                    self.cut_short += 1
                    up.close()
            return resp
