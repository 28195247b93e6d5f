"""Fakes for unit tests only: a fake OpenAI-compatible streaming server on loopback, a fake
Listener, a fake front-end and a fake TTS. The real components have their own tests."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

from tandem.audio.frames import FRAME_SAMPLES, FRAME_S
from tandem.speak.frontend import FrontEndOutput, UserFrame


@dataclass
class FakeLLMBehaviour:
    tokens: list[str] = field(default_factory=lambda: ["The", " answer", " is", " Paris", "."])
    first_token_delay_s: float = 0.0
    token_delay_s: float = 0.0
    status: int = 200
    garbage: bool = False
    error_after: int | None = None  # send an error object after this many tokens
    drop_after: int | None = None  # close the connection abruptly after this many tokens
    continues: bool = False  # as llama-server: a last assistant message is gone on from, its text streamed first
    models: list[str] | None = None  # what GET /v1/models lists (None: no such route, as on some servers)


class FakeOpenAIServer:
    """Speaks the OpenAI streaming chat protocol on 127.0.0.1, from its own thread and loop."""

    def __init__(self, behaviour: FakeLLMBehaviour | None = None) -> None:
        self.behaviour = behaviour or FakeLLMBehaviour()
        self.requests: list[dict[str, Any]] = []
        self.disconnects = 0
        self.tokens_sent = 0
        self.completed = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "FakeOpenAIServer":
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _models(self, request: web.Request) -> web.Response:
        if self.behaviour.models is None:
            return web.Response(status=404, text="Not Found")
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in self.behaviour.models]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"body": body, "t": time.perf_counter()})
        b = self.behaviour
        if b.status != 200:
            return web.Response(status=b.status, text='{"error": {"message": "overloaded"}}')
        if b.models is not None and body.get("model") not in b.models:  # as vLLM does
            return web.Response(status=404, text=f'{{"error": {{"message": "The model `{body.get("model")}` does not exist."}}}}')
        if not body.get("stream"):
            return web.json_response({"choices": [{"index": 0, "message": {"role": "assistant", "content": b.tokens[0]}}]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            if b.garbage:
                await resp.write(b"this is not SSE\n\n")
                return resp
            await asyncio.sleep(b.first_token_delay_s)
            tokens = list(b.tokens)
            if b.continues and body["messages"][-1]["role"] == "assistant":
                tokens[0] = body["messages"][-1]["content"] + tokens[0]
            for i, tok in enumerate(tokens):
                if b.error_after is not None and i == b.error_after:
                    await resp.write(b'data: {"error": {"message": "model crashed"}}\n\n')
                    return resp
                if b.drop_after is not None and i == b.drop_after:
                    request.transport.close()
                    return resp
                chunk = {"choices": [{"index": 0, "delta": {"content": tok}}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.tokens_sent += 1
                if b.token_delay_s:
                    await asyncio.sleep(b.token_delay_s)
            await resp.write(b"data: [DONE]\n\n")
            self.completed += 1
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            raise
        return resp


class FakeListener:
    """Replays scripted Listener messages when the fed audio passes their audio time."""

    def __init__(self, script: list[tuple[float, dict[str, Any]]] | None = None, in_speech_until: float = 0.0,
                 speech: list[tuple[float, float]] | None = None) -> None:
        self.script = sorted(script or [], key=lambda x: x[0])
        self.in_speech_until = in_speech_until
        self.speech = list(speech or [])  # more (start, end) audio-time spans of user speech, e.g. over a reply
        self.fed_s = 0.0
        self.callbacks: dict[str, Any] = {}
        self.closed: list[str] = []
        self.contexts: dict[str, list[str]] = {}  # per stream, every context the session sent

    def open(self, sid: str, cb) -> None:
        self.callbacks[sid] = cb

    def set_context(self, sid: str, text: str) -> None:
        self.contexts.setdefault(sid, []).append(text)

    def feed(self, sid: str, frame: np.ndarray) -> None:
        self.fed_s += len(frame) / 24000
        cb = self.callbacks[sid]
        while self.script and self.script[0][0] <= self.fed_s:
            _, msg = self.script.pop(0)
            cb({"sid": sid, **msg})
        talking = self.fed_s < self.in_speech_until or any(a <= self.fed_s < b for a, b in self.speech)
        cb({"sid": sid, "kind": "progress", "audio_s": self.fed_s, "vad_prob": 0.9 if talking else 0.0,
            "in_speech": talking, "busy": False})

    def close(self, sid: str) -> None:
        self.closed.append(sid)
        self.callbacks.pop(sid, None)


class FakeTokenizer:
    """Word-level: each new word gets the next id. PAD=0, start=1."""

    pad_id = 0
    start_id = 1

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.inv: dict[int, str] = {}

    def encode(self, text: str) -> list[int]:
        ids = []
        for w in text.split():
            if w not in self.vocab:
                self.vocab[w] = len(self.vocab) + 2
                self.inv[self.vocab[w]] = w
            ids.append(self.vocab[w])
        return ids

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.inv.get(i, "") for i in ids if i > 1)


class FakeFrontEnd:
    """Echoes each fed oracle word as its text output, with a tone frame while it speaks."""

    name = "fake"

    def __init__(self, step_s: float = 0.0) -> None:
        self.tokenizer = FakeTokenizer()
        self.fed: list[int] = []
        self.frames: list[UserFrame] = []
        self.step_s = step_s
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1
        self.fed.clear()

    def step(self, user: UserFrame, oracle_token: int) -> FrontEndOutput:
        if self.step_s:
            time.sleep(self.step_s)
        self.fed.append(oracle_token)
        self.frames.append(user)
        if oracle_token > 1:
            t = np.arange(FRAME_SAMPLES) / 24000
            return FrontEndOutput(0.3 * np.sin(2 * np.pi * 220 * t).astype(np.float32), [self.tokenizer.decode([oracle_token])])
        return FrontEndOutput(np.zeros(FRAME_SAMPLES, np.float32), [])

    def step_batch(self, users, tokens):
        return [self.step(u, t) for u, t in zip(users, tokens)]


class FakeTTS:
    """0.5 s of tone per segment, after an optional synthesis delay."""

    sample_rate = 24000

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.texts: list[str] = []

    def synthesize(self, text: str) -> np.ndarray:
        self.texts.append(text)
        time.sleep(self.delay_s)
        t = np.arange(12000) / 24000
        return (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


class WordTTS:
    """A steady level for 0.25 s per word: how many words were heard is how long the voice was loud."""

    sample_rate = 24000
    WORD_S = 0.25

    def synthesize(self, text: str) -> np.ndarray:
        return np.full(int(self.WORD_S * 24000) * len(text.split()), 0.3, np.float32)


class FakeStack:
    """Stands for tandem.runtime.stack.Stack in benchmark tests that need no LLM: nothing to start."""

    llm_config = None

    def __init__(self, config) -> None:  # noqa: ANN001
        pass

    def __enter__(self) -> "FakeStack":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def pids(self) -> list[int]:
        return []


class FakeTranscriber:
    """Hears "It is Paris." wherever the assistant channel is loud; keeps the context each call was given."""

    def __init__(self) -> None:
        self.contexts: list[str | None] = []

    def words(self, audio: np.ndarray, context: str | None = None) -> list:
        from tandem.bench.scoring import Word

        self.contexts.append(context)
        loud = np.flatnonzero(np.abs(audio) > 0.1)
        if not len(loud):
            return []
        t = loud[0] / 24000
        return [Word("It", t, t + 0.2), Word("is", t + 0.2, t + 0.4), Word("Paris.", t + 0.4, t + 0.9)]


__all__ = ["FRAME_S", "WordTTS", "FakeOpenAIServer", "FakeLLMBehaviour", "FakeListener", "FakeFrontEnd", "FakeTTS", "FakeTokenizer",
           "FakeStack", "FakeTranscriber"]


async def until(condition, timeout_s: float = 5.0) -> None:
    """Polls instead of sleeping a fixed time: a busy CI machine may take longer than a fake's delay."""
    deadline = time.perf_counter() + timeout_s
    while not condition():
        assert time.perf_counter() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)
