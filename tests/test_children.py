"""Child processes: a death at start-up stops the tool with its cause; a death later is restarted."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tandem.runtime.children import Supervisor, describe_exit
from tandem.runtime.errors import BackendUnavailable
from tandem.llm.local_server import LocalLlamaServer

FAKE = [sys.executable, str(Path(__file__).parent / "fake_llm_process.py")]
ROOT = Path(__file__).resolve().parents[1]


def test_describe_exit_names_the_signal_and_what_it_means():
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(-signal.SIGILL).startswith("died of SIGILL (illegal instruction")
    assert "out-of-memory" in describe_exit(-signal.SIGKILL)
    assert describe_exit(-99) == "died of signal 99"


def test_a_server_that_dies_of_sigill_at_its_first_request_stops_the_start_with_the_cause_and_the_fix():
    srv = LocalLlamaServer(command=[*FAKE, "--die-on-request", "SIGILL"])
    with pytest.raises(BackendUnavailable) as e:
        srv.start()
    msg = str(e.value)
    assert "SIGILL" in msg and "illegal instruction" in msg and "make setup-llm" in msg
    assert "\n" not in msg
    assert not srv.alive()


def test_tandem_run_with_a_server_that_dies_of_sigill_exits_non_zero_with_one_line(tmp_path):
    env = dict(os.environ, TANDEM_LLM_SERVER_CMD=" ".join([*FAKE, "--die-on-request", "SIGILL"]))
    env.pop("TANDEM_LLM_URL", None)
    r = subprocess.run([sys.executable, "-m", "tandem", "run", str(ROOT / "examples" / "question.wav"),
                        "--out", str(tmp_path / "o.wav")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tandem: error:"), r.stderr
    assert "SIGILL" in lines[0] and "make setup-llm" in lines[0]
    assert not (tmp_path / "o.wav").exists()


def test_a_server_that_answers_passes_the_check_and_is_restarted_on_the_same_port_when_killed():
    events = []
    sup = Supervisor(poll_s=0.05)
    sup.subscribe(events.append)
    with LocalLlamaServer(command=FAKE) as srv:
        url, pid = srv.url, srv.pid
        sup.watch(srv)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while sup.status()["LLM server"]["restarts"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        st = sup.status()["LLM server"]
        assert st["state"] == "up" and st["restarts"] == 1 and "SIGKILL" in st["last_fault"]
        assert srv.url == url and srv.pid != pid and srv.alive()
        assert [e["action"] for e in events] == ["restarting", "restarted"]
        sup.close()
    assert not srv.alive()


def test_the_llm_server_runs_in_a_session_and_process_group_of_its_own():
    # a CPU group of its own under autogroup scheduling (its one thread has a core when it wants one); a
    # process group of its own keeps a Ctrl-C aimed at us from reaching it twice
    with LocalLlamaServer(command=FAKE) as srv:
        assert os.getsid(srv.pid) == srv.pid != os.getsid(0)
        assert os.getpgid(srv.pid) == srv.pid != os.getpgid(0)


class _Sleeper:
    """A child that the test kills; `restart` starts another (or fails, when told to)."""

    def __init__(self, name: str = "sleeper") -> None:
        self.name = name
        self.fail_restart = False
        self.proc = subprocess.Popen(["sleep", "60"])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def restart(self) -> None:
        if self.fail_restart:
            raise RuntimeError("no luck")
        self.proc = subprocess.Popen(["sleep", "60"])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _wait(cond, timeout_s: float = 5.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_supervisor_gives_up_after_its_restart_limit_and_says_so():
    part = _Sleeper()
    events = []
    sup = Supervisor(poll_s=0.02, max_restarts=2, window_s=60)
    sup.subscribe(events.append)
    sup.watch(part)
    try:
        for n in (1, 2):
            part.kill()
            _wait(lambda: sup.status()["sleeper"]["restarts"] == n and part.alive())
        part.kill()
        _wait(lambda: sup.status()["sleeper"]["state"] == "down")
        _wait(lambda: len(events) == 5)  # the state is set a moment before its event is told
        assert [e["action"] for e in events] == ["restarting", "restarted"] * 2 + ["down"]
        assert sup.status()["sleeper"]["faults"] == 3
    finally:
        sup.close()
        part.kill()


def test_a_failed_restart_is_tried_again_until_the_limit():
    part = _Sleeper()
    part.fail_restart = True
    events = []
    sup = Supervisor(poll_s=0.02, max_restarts=3, window_s=60)
    sup.subscribe(events.append)
    sup.watch(part)
    try:
        part.kill()
        _wait(lambda: sup.status()["sleeper"]["state"] == "down")
        assert [e["action"] for e in events] == ["restarting", "restart_failed"] * 3 + ["down"]
    finally:
        sup.close()


def test_an_unsubscribed_callback_hears_nothing_more():
    part = _Sleeper()
    heard = []
    sup = Supervisor(poll_s=0.02)
    unsubscribe = sup.subscribe(heard.append)
    sup.watch(part)
    try:
        unsubscribe()
        part.kill()
        _wait(lambda: sup.status()["sleeper"]["restarts"] == 1)
        assert heard == []
    finally:
        sup.close()
        part.kill()
