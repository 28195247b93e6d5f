"""Is the user's turn over? The embedded LLM's own guess, as a second reading of a pause's words.

After words that read whole ("Can you tell me?", "I'd like to book.", "It was much steeper than I
expected."), whether the speaker is done is what a language model knows: given the conversation so far
and the user's words, the chance that the user's message ends here is the chance of the chat template's
end-of-message token next (LiveKit Agents' turn detector asks a fine-tuned Qwen the same question). The
embedded SmolLM2-135M gives it in one prompt evaluation (10-80 ms on one thread), through llama.cpp's own
`/completion` endpoint with `n_probs`: on the dev questions it is 0.34-0.96 after every whole question,
under 0.1 after 9 of 12 fragments that Whisper wrote with a full stop or a question mark, and after four in five
of a story's sentences (docs/notes/full-duplex-bench.md). Only for the embedded model (its template, its
token), and only as a hint: an answer that is late, or a server that does not give one, counts as none.
"""
from __future__ import annotations

import logging
import math

import httpx

log = logging.getLogger(__name__)

SYSTEM = "You are a helpful voice assistant."
END_TOKEN = "<|im_end|>"


def chatml(text: str, system: str = SYSTEM) -> str:
    """The user's words as SmolLM2's chat template has them, the message left open."""
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{text.strip()}"


class TurnEndJudge:
    """`await judge.p_end(text)`: the chance that the user's message ends after `text` (None: no answer)."""

    def __init__(self, chat_url: str, timeout_s: float = 0.5, top: int = 20) -> None:
        self.base = chat_url.rstrip("/").removesuffix("/chat/completions").removesuffix("/v1")
        self.timeout_s = timeout_s
        self.top = top
        self._http: httpx.AsyncClient | None = None
        self._end_id: int | None = None
        self.broken = False  # the server gave no usable answer once: asked no more
        self.asked = 0  # questions put to the server

    async def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s))
        return self._http

    async def _end(self, http: httpx.AsyncClient) -> int:
        if self._end_id is None:
            r = await http.post(self.base + "/tokenize", json={"content": END_TOKEN, "parse_special": True})
            r.raise_for_status()
            tokens = r.json()["tokens"]
            if len(tokens) != 1:
                raise ValueError(f"{END_TOKEN} is {len(tokens)} tokens for this server's model")
            self._end_id = int(tokens[0])
        return self._end_id

    async def p_end(self, text: str) -> float | None:
        if self.broken or not text.strip():
            return None
        self.asked += 1
        try:
            http = await self._client()
            end = await self._end(http)
            r = await http.post(self.base + "/completion", json={
                "prompt": chatml(text), "n_predict": 1, "n_probs": self.top, "temperature": 0, "cache_prompt": True})
            r.raise_for_status()
            top = r.json()["completion_probabilities"][0]["top_logprobs"]
        except httpx.TimeoutException:
            return None  # late: silence decides, as it would without a judge
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as e:
            self.broken = True
            log.warning("the turn-end judge at %s gave no answer (%s: %s); pauses are judged by their words alone",
                        self.base, type(e).__name__, e)
            return None
        return sum(math.exp(float(c["logprob"])) for c in top if int(c["id"]) == end)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
