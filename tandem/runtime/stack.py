"""The embedded default stack, started the way a user starts it and always stopped with the tool:
the Listener process, the LLM (a llama.cpp server on loopback, or any server given by URL) and the TTS.

Every part proves it works before the stack is handed out (the LLM server answers one completion,
the Listener decodes once, the voice speaks once); one that cannot stops the tool with one line
that names the cause. The child processes are then watched by a `Supervisor`, which restarts one
that dies and tells the sessions (their timelines) and `/api/status`."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .children import Supervisor
from .errors import BackendUnavailable
from ..listener.frame_vad import SILERO
from ..listener.process import ListenerProcess
from ..listener.worker import ListenerConfig
from ..llm.client import ChatClient, LLMConfig
from ..llm.local_server import LocalLlamaServer
from ..llm.probe import LLMProbeFailed, probe
from .realtime import BACKEND_NICE, LLM_NICE, favour_the_frame_loop, renice_on_restart
from ..speak.tts import TTS, HibariTTS, warm_first_words

log = logging.getLogger(__name__)


@dataclass
class StackConfig:
    llm_url: str | None = None
    llm_model: str | None = None
    llm_threads: int = 1
    llm_parallel: int = 2  # embedded LLM slots (llama-server: requests at once, batched; one session pins one)
    listener: ListenerConfig = field(default_factory=ListenerConfig)
    need_llm: bool = True
    need_tts: bool = True
    knowledge: Path | None = None  # the user's documents (--knowledge): a folder or one file
    knowledge_index: Path | None = None  # where their index lives (default: a cache directory)
    knowledge_passages: int = 1  # passages per prompt
    backend_nice: int = BACKEND_NICE  # the Listener's niceness, below the frame loop (0: leave the back-end as is)
    llm_nice: int = LLM_NICE  # the embedded LLM's (realtime.LLM_NICE); with backend_nice 0 left as is too
    allow_llm_down: bool = False  # an LLM given by URL that fails its start-up check is only warned about


def stack_config(args, **kw) -> StackConfig:  # noqa: ANN001 - argparse.Namespace of run, bench, serve
    """The stack settings a command's --llm-* and --knowledge* options ask for."""
    return StackConfig(llm_url=getattr(args, "llm_url", None), llm_model=getattr(args, "llm_model", None),
                       knowledge=getattr(args, "knowledge", None), knowledge_index=getattr(args, "knowledge_index", None),
                       knowledge_passages=getattr(args, "knowledge_passages", 1),
                       allow_llm_down=getattr(args, "allow_llm_down", False), **kw)


class Stack(contextlib.AbstractContextManager):
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.server: LocalLlamaServer | None = None
        self.listener: ListenerProcess | None = None
        self.llm_config: LLMConfig | None = None
        self.tts: TTS | None = None
        self.knowledge = None  # tandem.knowledge.KnowledgeBase over --knowledge, when given
        self.supervisor = Supervisor()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "Stack":
        try:
            cfg = self.config
            if cfg.need_llm:  # first: a wrong URL is told in a second, before anything loads
                self.llm_config = self._checked(LLMConfig.from_env(cfg.llm_url, cfg.llm_model))
            if cfg.knowledge is not None:  # first: a wrong path fails before seconds of model loading
                from ..knowledge import KnowledgeBase, KnowledgeError

                if cfg.knowledge_passages < 1:
                    raise KnowledgeError("--knowledge-passages must be at least 1")
                self.knowledge = self._stack.enter_context(
                    KnowledgeBase.open(cfg.knowledge, cfg.knowledge_index, cfg.knowledge_passages))
                st = self.knowledge.index.stats
                log.info("knowledge: %d passages from %d documents (%s)", st.passages, st.documents, cfg.knowledge)
            if cfg.need_llm:
                if self.llm_config is None:
                    self.server = self._stack.enter_context(LocalLlamaServer(threads=cfg.llm_threads,
                                                                             parallel=cfg.llm_parallel))
                    self.llm_config = LLMConfig(url=self.server.url, model=self.server.model,
                                                prefill=self.server.continues_replies,
                                                slots=self.server.parallel if self.server.continues_replies else 0)
                log.info("LLM: %s (model %s)", self.llm_config.endpoint, self.llm_config.model)
            self.listener = self._stack.enter_context(ListenerProcess(cfg.listener))
            if cfg.need_tts:
                try:
                    self.tts = HibariTTS()
                    warm_first_words(self.tts)  # now, not in the first session's frames
                except Exception as e:  # noqa: BLE001 - any failure to load the voice is the same to a user
                    raise BackendUnavailable(f"the voice (hibari-tts) could not be loaded: {type(e).__name__}: {e}") from e
            # closed first on the way out: parts stopped on purpose are not faults to restart
            self._stack.callback(self.supervisor.close)
            for part in (self.server, self.listener):
                if part is not None:
                    self.supervisor.watch(part)
            SILERO.warm()  # the sessions' voice meters (frame_vad.py): their first inference, not in a frame
            parts = [(p, n) for p, n in ((self.server, cfg.llm_nice if cfg.backend_nice else 0),
                                         (self.listener, cfg.backend_nice)) if p is not None]
            favour_the_frame_loop({p.pid: n for p, n in parts if p.pid})
            for part, nice in parts:
                self.supervisor.subscribe(renice_on_restart(nice, self._pid_of, {part.name}))
        except BaseException:
            self._stack.close()
            raise
        return self

    def _checked(self, llm: LLMConfig | None) -> LLMConfig | None:
        """An LLM given by URL, probed (llm/probe.py): a failure stops the tool, or with allow_llm_down is
        said once and the tool starts without it (oracles come when it answers)."""
        if llm is None:
            return None
        try:
            return probe(llm, model_given=bool(self.config.llm_model or os.environ.get("TANDEM_LLM_MODEL")))
        except LLMProbeFailed as e:
            if not self.config.allow_llm_down:
                raise
            print(f"tandem: warning: {e}; starting anyway (--allow-llm-down): the front-end answers alone "
                  "until the LLM does", file=sys.stderr, flush=True)
            return llm

    def client(self) -> ChatClient | None:
        """A new client per event loop (httpx pools are bound to the loop that made them)."""
        return ChatClient(self.llm_config) if self.llm_config else None

    def adopt(self, part):  # noqa: ANN001, ANN201 - a started tandem.runtime.children.Part, returned
        """Stop `part` with the stack and restart it when it dies, like the stack's own parts."""
        self._stack.push(part)
        self._stack.callback(self.supervisor.close)  # before `part` is stopped on purpose
        self.supervisor.watch(part)
        return part

    def _pid_of(self, part: str) -> int | None:
        return self.supervisor.status().get(part, {}).get("pid")

    def pids(self) -> list[int]:
        return [p for p in (self.server and self.server.pid, self.listener and self.listener.pid) if p]

    def __exit__(self, *exc) -> None:
        self._stack.close()
