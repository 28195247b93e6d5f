"""An item of Full-Duplex-Bench through a live server, the way FDB's own Moshi client plays it.

FDB's client (`v1_v1.5/model_inference/moshi/inference.py`, read in docs/notes/full-duplex-bench.md) connects
to `/api/chat`, waits for the handshake, streams the input as Ogg-Opus in 80 ms frames of 1920 samples at
24 kHz with no drift correction, sends half a second more and closes; its output.wav is 80 ms of zeros and
then every decoded sample as it arrived, back to back, cut or padded to the input's length. That only lines
up with the input when the server sends audio every frame, silence included, as Moshi does (and `tandem
serve` does). `play` does the same with this project's protocol client, so `tandem bench --fdb DIR --server
URL` scores what FDB's client would have recorded.
"""
from __future__ import annotations

import asyncio

import numpy as np

from ..audio.frames import FRAME_SAMPLES
from ..server.client import ProtocolClient

LEAD_ZEROS = FRAME_SAMPLES  # FDB's client writes one frame of zeros before what it received
AFTER_S = 0.5  # it goes on this long after the input's last frame before closing


async def play(url: str, audio24k: np.ndarray, token: str | None = None) -> np.ndarray:
    """The assistant's channel as FDB's client records it: 24 kHz, as long as `audio24k`."""
    client = await ProtocolClient(url, token=token, events=False).connect()
    try:
        await client.speak(audio24k)
        await asyncio.sleep(AFTER_S)
    finally:
        await client.close()
    got = np.concatenate([np.zeros(LEAD_ZEROS, np.float32), client.got.pcm()])[: len(audio24k)]
    return np.concatenate([got, np.zeros(len(audio24k) - len(got), np.float32)])


def play_item(url: str, audio24k: np.ndarray, token: str | None = None) -> np.ndarray:
    return asyncio.run(play(url, audio24k, token))
