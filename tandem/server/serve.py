"""`tandem serve`: the embedded stack behind the WebSocket server, until Ctrl-C or SIGTERM."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from .. import frontend as fe_registry
from ..errors import TandemError
from ..session import SessionConfig
from ..stack import Stack, StackConfig
from . import protocol as proto
from .app import ServerConfig, check_bind, make_app
from .hub import Backend, Hub, HubConfig
from .shared import CompactProvider, PerSessionFrontEnds, SerializedTTS, SharedLLM

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    server: ServerConfig
    mode: str = "tandem"
    max_sessions: int = 4
    record_dir: Path | None = None
    front_end: str = "compact"
    checkpoint: Path | None = None
    oracle_policy: str = "kame"
    llm_url: str | None = None
    llm_model: str | None = None
    llm_concurrency: int = 1
    limits: proto.Limits = proto.Limits()


def front_end_provider(name: str, capacity: int, checkpoint: Path | None):
    if name == "compact":
        return CompactProvider(capacity, str(checkpoint) if checkpoint else None)
    kwargs = {"checkpoint": checkpoint} if checkpoint else {}
    fe_registry.build(name, **kwargs)  # fail now, with a clear message, if it is not available
    return PerSessionFrontEnds(lambda tts: fe_registry.build(name, tts=tts, **kwargs), name=name)


async def serve_until_stopped(hub: Hub, cfg: ServerConfig, ready=None) -> None:  # noqa: ANN001
    runner = web.AppRunner(make_app(hub, cfg), handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise TandemError(f"cannot listen on {cfg.host}:{cfg.port}: {e.strerror or e}") from None
    port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - the real port when 0 was asked for
    print(f"tandem: serving on http://{cfg.host}:{port}/ (WebSocket /api/chat, mode {hub.config.session.mode}, "
          f"at most {hub.config.max_sessions} sessions)", flush=True)
    if ready is not None:
        ready(port)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def serve(opts: ServeOptions) -> int:
    check_bind(opts.server)
    if opts.max_sessions < 1 or opts.max_sessions > 256:
        raise TandemError("--max-sessions must be between 1 and 256")
    if opts.record_dir is not None:
        opts.record_dir.mkdir(parents=True, exist_ok=True)
    provider = None
    if opts.mode in ("tandem", "frontend"):
        provider = front_end_provider(opts.front_end, opts.max_sessions, opts.checkpoint)
    stack_cfg = StackConfig(llm_url=opts.llm_url, llm_model=opts.llm_model, need_llm=opts.mode != "frontend")
    with Stack(stack_cfg) as stack:
        async def main() -> None:
            client = stack.client()
            llm = SharedLLM(client, opts.llm_concurrency) if client is not None else None
            backend = Backend(stack.listener, llm, SerializedTTS(stack.tts) if stack.tts else None, provider)
            hub = Hub(backend, HubConfig(session=SessionConfig(mode=opts.mode), max_sessions=opts.max_sessions,
                                         limits=opts.limits, record_dir=opts.record_dir,
                                         oracle_policy=opts.oracle_policy))
            try:
                await serve_until_stopped(hub, opts.server)
            finally:
                await hub.aclose()
                if llm is not None:
                    await llm.aclose()

        asyncio.run(main())
    return 0
