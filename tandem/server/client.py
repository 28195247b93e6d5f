"""A Python client of the server's protocol (Moshi's, plus the event extension), with real Opus.
Used by the load generator and the tests; `ProtocolClient.speak` streams audio in real time."""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
import sphn

from ..audio.frames import AUDIBLE, FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from . import protocol as proto


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class HandshakeError(Exception):
    """The server refused the connection or never sent its handshake."""


@dataclass
class Received:
    audio: list[np.ndarray] = field(default_factory=list)  # decoded PCM chunks in arrival order
    audio_t: list[float] = field(default_factory=list)  # perf_counter when each chunk arrived
    texts: list[str] = field(default_factory=list)
    texts_t: list[float] = field(default_factory=list)  # perf_counter when each text arrived
    events: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    pages: int = 0
    unknown: int = 0

    def pcm(self) -> np.ndarray:
        return np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)

    def of_type(self, typ: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == typ]


class ProtocolClient:
    def __init__(self, base_url: str, token: str | None = None, events: bool = True,
                 headers: dict[str, str] | None = None, subprotocols: tuple[str, ...] = ()) -> None:
        self.url = base_url.rstrip("/") + "/api/chat" + ("?events=1" if events else "")
        # the token goes in a header, not the URL, which servers and proxies write to their logs
        self.headers = {**auth_headers(token), **(headers or {})}
        self.subprotocols = subprotocols
        self.got = Received()
        self._writer = sphn.OpusStreamWriter(SAMPLE_RATE)
        self._reader = sphn.OpusStreamReader(SAMPLE_RATE)
        self._http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self._recv: asyncio.Task | None = None
        self._handshake = asyncio.Event()
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self.connected_t = 0.0

    async def connect(self, timeout_s: float = 30.0) -> "ProtocolClient":
        self._http = aiohttp.ClientSession()
        try:
            self.ws = await self._http.ws_connect(self.url, headers=self.headers, protocols=self.subprotocols,
                                                  max_msg_size=1 << 20,
                                                  timeout=aiohttp.ClientWSTimeout(ws_close=5.0))
        except aiohttp.WSServerHandshakeError as e:
            await self._http.close()
            raise HandshakeError(f"HTTP {e.status}: {e.message}") from None
        self._recv = asyncio.get_running_loop().create_task(self._read())
        try:
            await asyncio.wait_for(self._handshake.wait(), timeout_s)
        except asyncio.TimeoutError:
            await self.close()
            raise HandshakeError("no handshake from the server") from None
        self.connected_t = time.perf_counter()
        return self

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.BINARY or not msg.data:
                    self.got.unknown += 1
                    continue
                kind, payload = msg.data[0], msg.data[1:]
                if kind == proto.HANDSHAKE:
                    self._handshake.set()
                elif kind == proto.AUDIO:
                    pcm = self._reader.append_bytes(payload)
                    self.got.pages += 1
                    if len(pcm):
                        self.got.audio.append(np.asarray(pcm, np.float32))
                        self.got.audio_t.append(time.perf_counter())
                elif kind == proto.TEXT:
                    self.got.texts.append(payload.decode("utf-8"))
                    self.got.texts_t.append(time.perf_counter())
                elif kind == proto.METADATA:
                    self.got.events.append(json.loads(payload))
                elif kind == proto.ERROR:
                    self.got.errors.append(payload.decode("utf-8", "replace"))
                else:
                    self.got.unknown += 1
        finally:
            self.close_code = self.ws.close_code
            self.closed.set()

    async def send_raw(self, data: bytes | str) -> None:
        assert self.ws is not None
        if isinstance(data, str):
            await self.ws.send_str(data)
        else:
            await self.ws.send_bytes(data)

    def encode(self, frame: np.ndarray) -> bytes:
        return self._writer.append_pcm(np.ascontiguousarray(frame, np.float32))

    async def send_frame(self, frame: np.ndarray) -> None:
        page = self.encode(frame)
        if page:
            await self.send_raw(proto.audio(page))

    async def speak(self, audio: np.ndarray, realtime: bool = True) -> float:
        """Stream `audio` (24 kHz) as 80 ms pages, paced like a microphone. Returns the perf_counter
        time at which the first sample was sent (sample n was sent at start + n / 24000)."""
        n = -(-len(audio) // FRAME_SAMPLES)
        padded = np.zeros(n * FRAME_SAMPLES, np.float32)
        padded[: len(audio)] = audio
        start = time.perf_counter()
        for k in range(n):
            if realtime:
                delay = start + k * FRAME_S - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            if self.closed.is_set():
                break
            await self.send_frame(padded[k * FRAME_SAMPLES:(k + 1) * FRAME_SAMPLES])
        return start

    def first_audible_after(self, t: float) -> float | None:
        """perf_counter time of the first received audio chunk louder than silence after `t`."""
        for at, pcm in zip(self.got.audio_t, self.got.audio):
            if at >= t and len(pcm) and float(np.max(np.abs(pcm))) > AUDIBLE:
                return at
        return None

    async def close(self) -> None:
        if self.ws is not None and not self.ws.closed:
            await self.ws.close()
        if self._recv is not None:
            await asyncio.gather(self._recv, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
