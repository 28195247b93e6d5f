"""The start-up check of an LLM given by URL: one short look before anything is loaded, so a wrong
`--llm-url` or `--llm-model` stops the tool at once with one line instead of a server that never uses it.

It asks what a user's mistake would break: the host resolves, something listens, it speaks the OpenAI
chat protocol, and it serves the model asked for (`GET /models` where the server has it, then one
one-token chat completion, the request every oracle makes).
"""
from __future__ import annotations

import socket
from dataclasses import replace
from urllib.parse import urlsplit

import httpx

from ..runtime.errors import BackendUnavailable
from .client import LLMConfig

FIX = "correct --llm-url, start that server, or pass --allow-llm-down to start anyway"


class LLMProbeFailed(BackendUnavailable):
    """The LLM given by URL cannot serve this tool; the message says what failed and what to do."""


def _base(cfg: LLMConfig) -> str:
    return cfg.endpoint.rsplit("/chat/completions", 1)[0]


def _check_host(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LLMProbeFailed(f"--llm-url {url!r} is not an http(s) URL (for example http://127.0.0.1:8080/v1)")
    try:
        socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    except (socket.gaierror, UnicodeError) as e:
        raise LLMProbeFailed(f"the LLM host {parts.hostname!r} of --llm-url {url} is unknown "
                             f"({getattr(e, 'strerror', None) or e}); {FIX}") from None


def _models(http: httpx.Client, cfg: LLMConfig) -> list[str] | None:
    """The ids the server lists, or None where it has no model list."""
    r = http.get(_base(cfg) + "/models")
    if r.status_code in (401, 403):
        raise LLMProbeFailed(f"the LLM server at {cfg.url} refused the API key (HTTP {r.status_code}); "
                             "set TANDEM_LLM_API_KEY")
    if r.status_code != 200:
        return None
    try:
        data = r.json().get("data")
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, AttributeError, TypeError):
        return None


def _chat(http: httpx.Client, cfg: LLMConfig) -> None:
    body = {"model": cfg.model, "max_tokens": 1, "temperature": 0.0, "stream": False,
            "messages": [{"role": "user", "content": "Say hi."}]}
    r = http.post(cfg.endpoint, json=body)
    detail = r.text[:160].strip().replace("\n", " ")
    if r.status_code == 404:
        if "model" in detail.lower():
            raise LLMProbeFailed(f"the LLM server at {cfg.url} does not serve model {cfg.model!r} ({detail}); "
                                 "give one it serves with --llm-model")
        raise LLMProbeFailed(f"{cfg.url} has no OpenAI chat endpoint (POST {cfg.endpoint} answered 404); "
                             "--llm-url is the server's OpenAI address, usually ending in /v1")
    if r.status_code in (401, 403):
        raise LLMProbeFailed(f"the LLM server at {cfg.url} refused the API key (HTTP {r.status_code}); "
                             "set TANDEM_LLM_API_KEY")
    if r.status_code != 200:
        raise LLMProbeFailed(f"the LLM server at {cfg.url} answered a one-token chat request with HTTP "
                             f"{r.status_code} ({detail}); {FIX}")
    try:
        r.json()["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise LLMProbeFailed(f"{cfg.endpoint} answered, but not as an OpenAI chat server ({detail!r}); "
                             "--llm-url is the server's OpenAI address, usually ending in /v1") from None


def probe(cfg: LLMConfig, model_given: bool = True, timeout_s: float = 30.0) -> LLMConfig:
    """`cfg` checked (LLMProbeFailed if it cannot work). With no model given, the server's only model,
    when it lists one, is the one used (the config returned)."""
    _check_host(cfg.url)
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    timeout = httpx.Timeout(timeout_s, connect=min(cfg.connect_timeout_s, timeout_s))
    try:
        with httpx.Client(headers=headers, timeout=timeout) as http:
            ids = _models(http, cfg)
            if ids and cfg.model not in ids:
                if not model_given and len(ids) == 1:
                    cfg = replace(cfg, model=ids[0])
                else:
                    served = ", ".join(ids[:8]) + (" ..." if len(ids) > 8 else "")
                    raise LLMProbeFailed(f"the LLM server at {cfg.url} does not serve model {cfg.model!r} "
                                         f"(it serves: {served}); give one of them with --llm-model")
            _chat(http, cfg)
    except httpx.ConnectError as e:
        why = "connection refused" if "refused" in str(e).lower() or not str(e) else str(e)
        raise LLMProbeFailed(f"nothing answers at --llm-url {cfg.url} ({why}); {FIX}") from None
    except httpx.TimeoutException:
        raise LLMProbeFailed(f"the LLM server at {cfg.url} did not answer within {timeout_s:g} s; {FIX}") from None
    except httpx.HTTPError as e:
        raise LLMProbeFailed(f"the LLM server at {cfg.url} could not be asked ({type(e).__name__}: {e}); "
                             f"{FIX}") from None
    return cfg
