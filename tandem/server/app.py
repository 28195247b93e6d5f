"""The aiohttp application: `/api/chat` (Moshi's protocol), `/api/status`, and the browser client at `/`.

Safe by default: `tandem serve` binds loopback; binding anything else needs `--token`, which every
client of `/api/chat` and `/api/status` then presents (`Authorization: Bearer`, the WebSocket
subprotocol `tandem-token.<token>`, or `?token=`); every request's Host must be an allowed name (a
page whose own name was rebound to 127.0.0.1 must not reach a tokenless loopback server); a
browser's Origin must be this server's own (or one given with `--allow-origin`); admission is
decided before the upgrade (401/403/503 are plain HTTP answers, so an admitted session never
notices a refused one).
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from ..runtime.errors import TandemError
from ..listener.frame_vad import SILERO
from .ticker import Hub

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
HUB_KEY = web.AppKey("hub", Hub)
CONFIG_KEY = web.AppKey("config", object)


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8998
    token: str | None = None
    allow_origins: tuple[str, ...] = field(default_factory=tuple)  # extra browser origins; "*" for any
    allow_hosts: tuple[str, ...] = field(default_factory=tuple)  # extra Host names; "*" for any


# The token as a WebSocket subprotocol: browsers cannot set headers on a WebSocket, and a token in
# the URL ends up in logs and histories. The server echoes the accepted value, as RFC 6455 requires.
TOKEN_PROTOCOL = "tandem-token."
_WILDCARD_BINDS = ("", "0.0.0.0", "::", "[::]")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def check_bind(cfg: ServerConfig) -> None:
    """Refuse to expose the server beyond this machine without a token."""
    if not is_loopback(cfg.host) and not cfg.token:
        raise TandemError(f"refusing to listen on {cfg.host} without --token: anyone who can reach it could "
                          f"use the assistant; pass --token SECRET (clients present it), or bind 127.0.0.1")
    if cfg.token is not None and len(cfg.token) < 8:
        raise TandemError("--token must be at least 8 characters")


def host_name(host_header: str) -> str | None:
    """The name in a Host header (lower case, no port, no brackets, no trailing dot); None if malformed."""
    if not host_header or any(c in host_header for c in "/\\@?# "):
        return None
    try:
        parts = urlsplit("//" + host_header)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return None
    return parts.hostname.rstrip(".") if parts.hostname else None


def host_allowed(host_header: str | None, cfg: ServerConfig) -> bool:
    """DNS rebinding: a page of evil.example whose name is made to resolve to 127.0.0.1 talks to this
    server as same-origin (its Origin then matches its Host), so the Host itself must be a name of
    this server: localhost, any IP address (an address cannot be rebound), the bound host, or one
    given with --allow-host."""
    if "*" in cfg.allow_hosts:
        return True
    name = host_name(host_header or "")
    if name is None:
        return False
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    allowed = {h.lower().strip("[]").rstrip(".") for h in cfg.allow_hosts}
    if cfg.host.lower() not in _WILDCARD_BINDS:
        allowed.add(cfg.host.lower().strip("[]").rstrip("."))
    return name in allowed


def _offered_protocols(request: web.Request) -> list[str]:
    return [p.strip() for h in request.headers.getall("Sec-WebSocket-Protocol", ()) for p in h.split(",") if p.strip()]


def _authorize(request: web.Request, token: str | None) -> tuple[bool, str | None]:
    """Whether the request carries the token (a `tandem-token.` subprotocol, `Authorization: Bearer`
    or `?token=`), and the token subprotocol to echo: a browser that offered one fails the handshake
    unless one is chosen, so it is echoed whenever it is acceptable, also on a server without token."""
    offered = [p for p in _offered_protocols(request) if p.startswith(TOKEN_PROTOCOL)]
    if not token:
        return True, offered[0] if offered else None

    def same(given: str) -> bool:
        return hmac.compare_digest(given.encode(), token.encode())

    for p in offered:
        if same(p[len(TOKEN_PROTOCOL):]):
            return True, p
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer " and same(auth[7:].strip()):
        return True, None
    given = request.query.get("token")  # still accepted, but it ends up in URLs and access logs
    return given is not None and same(given), None


def _origin_ok(request: web.Request, allowed: tuple[str, ...]) -> bool:
    """Browsers always send Origin on a WebSocket upgrade; other clients usually send none. A page
    from another site must not be able to drive this server with a visitor's microphone."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    if "*" in allowed or origin in allowed:
        return True
    parts = urlsplit(origin)
    return bool(parts.netloc) and parts.netloc.lower() == request.host.lower()


async def chat(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB_KEY]
    cfg: ServerConfig = request.app[CONFIG_KEY]
    authorized, protocol = _authorize(request, cfg.token)
    if not authorized:
        return _no_token()
    if not _origin_ok(request, cfg.allow_origins):
        return web.Response(status=403, text="origin not allowed\n")
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return web.Response(status=426, text="this endpoint speaks WebSocket (Moshi's protocol)\n")
    if not hub.reserve():
        return web.Response(status=503, text=f"server busy: all {hub.config.max_sessions} sessions in use (--max-sessions); try again later\n",
                            headers={"Retry-After": "5"})
    peer = request.remote or "?"
    lim = hub.config.limits
    ws = web.WebSocketResponse(max_msg_size=lim.max_message_bytes, heartbeat=20.0, compress=False,
                               protocols=(protocol,) if protocol else ())
    client = None
    try:
        await ws.prepare(request)
        await hub.off_loop(SILERO.ensure_spare)  # the session's voice meter, not built on the ticker's thread
        client = hub.create_client(ws, events=request.query.get("events", "0") in ("1", "true", "yes"), peer=peer)
        hub.join(client)
        async for msg in ws:
            client.on_message(msg)
    except ConnectionError as e:  # the client went away during the upgrade or a send
        log.info("connection from %s lost: %s", peer, e)
        if client is not None:
            client.close_reason = client.close_reason or "connection lost"
    except Exception:  # noqa: BLE001 - one connection's failure must not reach the others
        log.exception("connection from %s failed", peer)
        if client is not None:
            client.close_reason = client.close_reason or "internal error"
    finally:
        if client is not None:
            if client.close_reason is None and ws.exception() is not None:
                client.close_reason = f"connection error: {type(ws.exception()).__name__}"
            await hub.leave(client)
        else:
            hub.unreserve()
        if not ws.closed and ws.prepared:
            await ws.close()
    return ws


async def status(request: web.Request) -> web.Response:
    cfg: ServerConfig = request.app[CONFIG_KEY]
    if not _authorize(request, cfg.token)[0]:
        return _no_token()
    return web.json_response(request.app[HUB_KEY].status())


async def health(request: web.Request) -> web.Response:
    """For load balancers: 200 while a new session would be taken, 503 when full or a part of the
    back-end is down. No token (it tells nothing but readiness); the Host check applies."""
    r = request.app[HUB_KEY].readiness()
    return web.json_response(r, status=200 if r["ready"] else 503)


def _no_token() -> web.Response:
    return web.Response(status=401, text="missing or wrong token (Authorization: Bearer TOKEN, or the WebSocket "
                                         f"subprotocol {TOKEN_PROTOCOL}TOKEN)\n")


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(WEB_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def no_content(request: web.Request) -> web.Response:
    return web.Response(status=204)


@web.middleware
async def host_check(request: web.Request, handler):  # noqa: ANN001
    """Every path: even the page and /api/status must not be readable by a rebinding page."""
    cfg: ServerConfig = request.app[CONFIG_KEY]
    host = request.headers.get("Host")
    if not host_allowed(host, cfg):
        shown = repr(host[:100]) if host is not None else "(none)"
        hint = f"; if it is a name of this server, start it with --allow-host {host_name(host)}" if host and host_name(host) else ""
        return web.Response(status=403, text=f"host not allowed: {shown} is not a name of this server (a defence "
                                             f"against DNS rebinding){hint}\n")
    return await handler(request)


@web.middleware
async def security_headers(request: web.Request, handler):  # noqa: ANN001
    resp = await handler(request)
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("Referrer-Policy", "no-referrer")
    return resp


def make_app(hub: Hub, config: ServerConfig) -> web.Application:
    app = web.Application(middlewares=[security_headers, host_check], client_max_size=64 * 1024)
    app[HUB_KEY] = hub
    app[CONFIG_KEY] = config
    app.router.add_get("/", index)
    app.router.add_get("/favicon.ico", no_content)
    app.router.add_static("/static/", WEB_DIR, show_index=False, follow_symlinks=False)
    app.router.add_get("/api/chat", chat)
    app.router.add_get("/api/status", status)
    app.router.add_get("/api/health", health)

    async def on_shutdown(app: web.Application) -> None:
        await hub.aclose()

    app.on_shutdown.append(on_shutdown)
    return app
