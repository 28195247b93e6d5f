"""The embedded default stack, started the way a user starts it and always stopped with the tool:
the Listener process, the LLM (a llama.cpp server on loopback, or any server given by URL) and the TTS."""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from .listener.process import ListenerProcess
from .listener.worker import ListenerConfig
from .llm.client import ChatClient, LLMConfig
from .llm.local_server import LocalLlamaServer
from .tts import TTS, HibariTTS

log = logging.getLogger(__name__)


@dataclass
class StackConfig:
    llm_url: str | None = None
    llm_model: str | None = None
    llm_threads: int = 1
    listener: ListenerConfig = field(default_factory=ListenerConfig)
    need_llm: bool = True
    need_tts: bool = True


class Stack(contextlib.AbstractContextManager):
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.server: LocalLlamaServer | None = None
        self.listener: ListenerProcess | None = None
        self.llm_config: LLMConfig | None = None
        self.tts: TTS | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "Stack":
        try:
            cfg = self.config
            if cfg.need_llm:
                self.llm_config = LLMConfig.from_env(cfg.llm_url, cfg.llm_model)
                if self.llm_config is None:
                    self.server = self._stack.enter_context(LocalLlamaServer(threads=cfg.llm_threads))
                    self.llm_config = LLMConfig(url=self.server.url, model=self.server.model)
                    self.server.warm_up()
                log.info("LLM: %s (model %s)", self.llm_config.endpoint, self.llm_config.model)
            self.listener = self._stack.enter_context(ListenerProcess(cfg.listener))
            if cfg.need_tts:
                self.tts = HibariTTS()
        except BaseException:
            self._stack.close()
            raise
        return self

    def client(self) -> ChatClient | None:
        """A new client per event loop (httpx pools are bound to the loop that made them)."""
        return ChatClient(self.llm_config) if self.llm_config else None

    def pids(self) -> list[int]:
        return [p for p in (self.server and self.server.pid, self.listener and self.listener.pid) if p]

    def __exit__(self, *exc) -> None:
        self._stack.close()
