"""`tandem serve`: the embedded stack behind the WebSocket server, until Ctrl-C or SIGTERM."""
from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from ..speak import frontend as fe_registry
from ..runtime.errors import TandemError
from ..think.oracle import DEFAULT_POLICY
from ..runtime.realtime import BACKEND_NICE, LLM_NICE, settle_heap
from ..turn.scheduler import SchedulerConfig
from ..turn.session import SessionConfig
from ..listener.frame_vad import SILERO
from ..listener.worker import ListenerConfig
from ..runtime.stack import Stack, StackConfig
from . import protocol as proto
from .app import ServerConfig, check_bind, make_app
from .capacity import DEFAULT_MAX_SESSIONS
from .shared import CompactProvider, PerSessionFrontEnds, SharedLLM
from .shared import Backend
from .ticker import Hub, HubConfig
from .tts_process import ProcessTTS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    """What `tandem serve` is asked for. Below the line, settings measured once and kept at their best value
    (docs/BENCHMARKS.md and DESIGN.md say where each was chosen); they are fields, not flags, for experiments."""
    server: ServerConfig
    mode: str = "tandem"
    max_sessions: int = DEFAULT_MAX_SESSIONS
    record_dir: Path | None = None
    front_end: str = "compact"
    front_end_kwargs: dict = field(default_factory=dict)
    llm_url: str | None = None
    llm_model: str | None = None
    allow_llm_down: bool = False
    knowledge: Path | None = None
    knowledge_index: Path | None = None
    knowledge_passages: int = 1
    limits: proto.Limits = proto.Limits()
    # ----
    oracle_policy: str = DEFAULT_POLICY
    llm_threads: int = 1  # CPU threads of the embedded LLM server: on 2 cores the other is the frame loop's
    llm_affinity_wait_s: float = 0.3  # SharedLLM: how long the oldest request may wait for one that goes on from the last prompt
    listener_batch: int = ListenerConfig.decode_batch  # Whisper decodes of different sessions run as one batch
    listener_lanes: int = ListenerConfig.decode_lanes  # Whisper decodes at once, one kept for finals and pauses
    listener_threads: int = ListenerConfig.whisper_threads  # threads of each decode
    listener_reuse: bool = ListenerConfig.reuse_paused_partial  # a final the paused partial decoded is not decoded again
    listener_hops_yield: bool = ListenerConfig.hops_yield  # no partial of a user still talking starts beside a final or pause
    settle_on_pause: bool = SchedulerConfig.settle_on_pause  # a whole sentence heard in a pause counts as the final
    backend_nice: int = BACKEND_NICE  # niceness of the Listener process (0: leave the back-end alone)
    llm_nice: int = LLM_NICE  # niceness of the embedded LLM server

    @property
    def llm_slots(self) -> int:
        """The embedded LLM's slots: one per session, where llama-server keeps that conversation's prompt
        evaluated, so a session's next request evaluates only its new words (at 6 sessions, against 4 slots
        shared: time to first token 0.16-0.24 s median against 0.27-0.36; docs/history/BENCHMARKS-rounds.md, twelfth round).
        At least 2, so that one session is served by the same engine as many."""
        return max(2, self.max_sessions)


def front_end_provider(name: str, capacity: int, kwargs: dict):
    """Front-ends with a shared batched model get one pool; others one instance per session."""
    if name == "compact":
        ck = kwargs.get("checkpoint")
        return CompactProvider(capacity, str(ck) if ck else None)
    if name == "moshi":
        from ..frontends.moshi.pool import MoshiPool

        return MoshiPool(capacity, **kwargs)
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
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # a graceful stop: sessions are closed and recordings written
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        print("tandem: stopping", flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await runner.cleanup()


def _check_port_free(cfg: ServerConfig) -> None:
    import socket

    if cfg.port == 0:
        return
    try:
        infos = socket.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise TandemError(f"cannot listen on {cfg.host}: {e.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise TandemError(f"cannot listen on {cfg.host}:{cfg.port}: {e.strerror}") from None


def serve(opts: ServeOptions) -> int:
    check_bind(opts.server)
    _check_port_free(opts.server)  # before the back-end spends seconds loading
    if opts.max_sessions < 1 or opts.max_sessions > 256:
        raise TandemError("--max-sessions must be between 1 and 256")
    if opts.record_dir is not None:
        opts.record_dir.mkdir(parents=True, exist_ok=True)
    # the voice runs in a process of its own (tts_process.py), not in the Stack's in-process engine
    stack_cfg = StackConfig(llm_url=opts.llm_url, llm_model=opts.llm_model, need_llm=opts.mode != "frontend",
                            allow_llm_down=opts.allow_llm_down, backend_nice=opts.backend_nice, llm_nice=opts.llm_nice,
                            need_tts=False, llm_parallel=opts.llm_slots, llm_threads=opts.llm_threads,
                            knowledge=opts.knowledge, knowledge_index=opts.knowledge_index,
                            knowledge_passages=opts.knowledge_passages,
                            listener=ListenerConfig(decode_batch=opts.listener_batch, decode_lanes=opts.listener_lanes,
                                                    whisper_threads=opts.listener_threads,
                                                    reuse_paused_partial=opts.listener_reuse,
                                                    hops_yield=opts.listener_hops_yield))
    with Stack(stack_cfg) as stack:  # first: a wrong --llm-url is told before any model loads
        provider = None
        if opts.mode in ("tandem", "frontend"):
            provider = front_end_provider(opts.front_end, opts.max_sessions, opts.front_end_kwargs)
        voice = stack.adopt(ProcessTTS())
        SILERO.fill(opts.max_sessions)  # every admitted session's voice meter, before any connects
        settle_heap()  # again: the voice's client and the server's own objects were made after the stack's

        async def main() -> None:
            client = stack.client()
            # every admitted session may have a request in flight: the embedded server has a slot for each, and a
            # server behind --llm-url queues or batches them itself
            llm = SharedLLM(client, opts.llm_slots, opts.llm_affinity_wait_s) if client is not None else None
            backend = Backend(stack.listener, llm, voice, provider, supervisor=stack.supervisor,
                              knowledge=stack.knowledge)
            session = SessionConfig(mode=opts.mode, scheduler=SchedulerConfig(settle_on_pause=opts.settle_on_pause))
            hub = Hub(backend, HubConfig(session=session, max_sessions=opts.max_sessions,
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
