"""The embedded LLM's llama.cpp build: portable by construction, rebuilt when its flags change."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.llm import build

AVX512_OR_AMX = ("%zmm", "%tmm", "tilezero", "tileloadd", "{%k")  # registers and ops AVX2 machines lack


def test_the_installed_build_uses_avx2_and_nothing_newer():
    """A build for the building machine's own CPU (GGML_NATIVE) on a Xeon with AVX-512 and AMX died
    of SIGILL on the next machine; the installed llama-server must stay within x86-64-v3. It is part of
    `make setup`, so it is there to read."""
    if build.platform.machine() != "x86_64":
        pytest.skip("the check reads x86-64 instructions")
    binary = build.find()
    assert binary is not None, "make setup installs llama-server into the environment"
    objdump = shutil.which("objdump")
    assert objdump, "objdump (Debian binutils) is needed to read the build"
    asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(binary)], capture_output=True, text=True,
                         check=True).stdout
    assert "%ymm" in asm, "the build does not use AVX2 at all"
    found = {op: asm.count(op) for op in AVX512_OR_AMX if op in asm}
    assert not found, f"instructions beyond AVX2 in {binary.name}: {found}"


def test_a_changed_flag_or_version_gives_another_build_key():
    base = build.build_key("0.3.36", build.BASELINE_ARGS)
    assert build.build_key("0.3.36", build.BASELINE_ARGS) == base
    assert build.build_key("0.3.36", build.BASELINE_ARGS + " -DGGML_AVX512=ON") != base
    assert build.build_key("0.3.37", build.BASELINE_ARGS) != base


def test_flags_can_be_overridden_and_the_baseline_is_never_native(monkeypatch):
    monkeypatch.delenv("TANDEM_LLAMA_CMAKE_ARGS", raising=False)
    if build.platform.machine() == "x86_64":
        assert "-DGGML_NATIVE=OFF" in build.cmake_args()
        assert "-DGGML_AVX2=ON" in build.cmake_args() and "-DGGML_AVX512=OFF" in build.cmake_args()
    monkeypatch.setenv("TANDEM_LLAMA_CMAKE_ARGS", "-DGGML_NATIVE=ON")
    assert build.cmake_args() == "-DGGML_NATIVE=ON"


def test_a_cpu_without_avx2_is_told_at_setup(monkeypatch, capsys):
    old = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx popcnt"
    flags = build.cpu_flags(f"processor : 0\nflags\t\t: {old}\n")
    assert build.missing_cpu_features("x86_64", flags) == ["avx2", "fma", "f16c", "bmi2"]
    assert build.missing_cpu_features("aarch64", flags) == []
    monkeypatch.setattr(build, "missing_cpu_features", lambda: ["avx2", "fma"])
    monkeypatch.delenv("TANDEM_LLAMA_CMAKE_ARGS", raising=False)
    assert build.main(["--check-cpu"]) == 3
    err = capsys.readouterr().err
    assert "lacks avx2, fma" in err and "--llm-url" in err


def _fake_build(built: list[str]):
    def fake(args, dest, log):  # noqa: ANN001
        dest.mkdir(parents=True, exist_ok=True)
        (dest / build.BINARY).write_text(f"{args} {len(built)}")
        (dest / build.BINARY).chmod(0o755)
        built.append(args)
        return dest / build.BINARY
    return fake


def test_ensure_reuses_a_cached_build_and_rebuilds_when_the_flags_change(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build.sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.delenv("TANDEM_LLAMA_CMAKE_ARGS", raising=False)
    built: list[str] = []
    monkeypatch.setattr(build, "build", _fake_build(built))
    target = build.ensure()
    assert len(built) == 1 and target == tmp_path / "venv" / "bin" / "llama-server" and build.find() == target
    assert build.ensure() == target and len(built) == 1  # nothing to do
    target.unlink()  # a fresh venv on the same machine: the cached binary
    assert build.ensure() == target and len(built) == 1 and target.exists()
    monkeypatch.setenv("TANDEM_LLAMA_CMAKE_ARGS", build.BASELINE_ARGS + " -DGGML_LLAMAFILE=OFF")
    build.ensure()  # a changed flag: built anew, never the old binary
    assert len(built) == 2 and built[-1].endswith("-DGGML_LLAMAFILE=OFF")
    assert target.read_text().startswith(built[-1])


def test_a_failed_build_stops_setup_with_one_line_saying_why_and_what_to_do(tmp_path, monkeypatch, capsys):
    """No silent fall-back: the exit code is not 0 and the line names the failing step and the log."""
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build.sys, "prefix", str(tmp_path / "venv"))
    log = tmp_path / "build.log"

    def failing(args, dest, log_path):  # noqa: ANN001 - a compiler that dies, as _run reports it
        log.write_text("c++: fatal error: Killed signal terminated program cc1plus\n")
        build._run(["false"], log, "compiling llama-server")

    monkeypatch.setattr(build, "build", failing)
    assert build.main([]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "compiling llama-server failed" in err[0] and "Killed signal" in err[0] and str(log) in err[0]
    assert "make setup" in err[0] and "--llm-url" in err[0]
    assert build.find() is None


def test_a_machine_without_a_compiler_is_told_before_the_download(monkeypatch, capsys):
    monkeypatch.setattr(build.shutil, "which", lambda tool: None if tool == "cmake" else "/usr/bin/" + tool)
    monkeypatch.setattr(build, "missing_cpu_features", lambda: [])
    assert build.main([]) == 3
    err = capsys.readouterr().err
    assert "needs cmake" in err and "apt-get install" in err


def test_the_module_runs_with_the_standard_library_only():
    """`make setup` runs it before anything is installed: it must import nothing else."""
    code = ("import sys; sys.modules['numpy'] = None; sys.modules['httpx'] = None; "
            "from tandem.llm import build; print(build.build_key(build.VERSION, build.cmake_args()))")
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_a_missing_llama_server_is_a_clear_error(monkeypatch, tmp_path):
    from tandem.runtime.errors import BackendUnavailable
    from tandem.llm import local_server
    from tandem.llm.local_server import LocalLlamaServer

    monkeypatch.setattr(local_server, "find", lambda: None)
    with pytest.raises(BackendUnavailable, match="run `make setup`"):
        LocalLlamaServer(parallel=2)
    fake = tmp_path / "llama-server"
    monkeypatch.setattr(local_server, "find", lambda: fake)
    srv = LocalLlamaServer(parallel=3)
    assert srv.server_binary == fake and srv.continues_replies
