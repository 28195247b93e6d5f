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
    of SIGILL on the next machine; the installed CPU code must stay within x86-64-v3."""
    if build.platform.machine() != "x86_64":
        pytest.skip("the check reads x86-64 instructions")
    if build.installed_key() is None:
        pytest.skip("llama-cpp-python was not installed by tandem.llm.build")
    objdump = shutil.which("objdump")
    assert objdump, "objdump (Debian binutils) is needed to read the build"
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so"
    assert lib.exists(), f"no fixed CPU library at {lib}: was a dispatch build installed?"
    asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    assert "%ymm" in asm, "the build does not use AVX2 at all"
    found = {op: asm.count(op) for op in AVX512_OR_AMX if op in asm}
    assert not found, f"instructions beyond AVX2 in {lib.name}: {found}"


def test_the_pinned_version_is_the_locked_one():
    assert build.locked_version() == build.PINNED
    assert build.locked_version(Path("/nonexistent/requirements.lock")) == build.PINNED


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


def test_ensure_reuses_a_cached_build_and_rebuilds_when_the_flags_change(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build.sys, "prefix", str(tmp_path / "venv"))
    (tmp_path / "venv").mkdir()
    monkeypatch.delenv("TANDEM_LLAMA_CMAKE_ARGS", raising=False)
    built, installed = [], []

    def fake_build(version, args, dest):  # noqa: ANN001
        dest.mkdir(parents=True, exist_ok=True)
        wheel = dest / f"llama_cpp_python-{version}-{len(built)}.whl"
        wheel.write_text(args)
        built.append(args)
        return wheel

    monkeypatch.setattr(build, "build_wheel", fake_build)
    monkeypatch.setattr(build, "_pip", lambda *a, **k: installed.append(a[-1]))
    key = build.ensure()
    assert len(built) == 1 and build.installed_key() == key
    assert build.ensure() == key and len(built) == 1 and len(installed) == 1  # nothing to do
    (tmp_path / "venv" / build.MARKER).unlink()  # a fresh venv on the same machine: the cached wheel
    assert build.ensure() == key and len(built) == 1 and len(installed) == 2
    monkeypatch.setenv("TANDEM_LLAMA_CMAKE_ARGS", build.BASELINE_ARGS + " -DGGML_LLAMAFILE=OFF")
    other = build.ensure()  # a changed flag: built anew, never the old wheel
    assert other != key and len(built) == 2 and built[-1].endswith("-DGGML_LLAMAFILE=OFF")
    assert Path(installed[-1]).read_text() == built[-1]


def test_the_module_runs_with_the_standard_library_only():
    """`make setup` runs it before anything is installed: it must import nothing else."""
    code = ("import sys; sys.modules['numpy'] = None; sys.modules['httpx'] = None; "
            "from tandem.llm import build; print(build.locked_version())")
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_llama_server_builds_are_keyed_by_version_and_flags_and_missing_one_is_a_clear_error(monkeypatch, tmp_path):
    import pytest

    from tandem.errors import BackendUnavailable
    from tandem.llm import build_server
    from tandem.llm.local_server import LocalLlamaServer

    assert build_server.build_key("0.3.36", "-DA=1") != build_server.build_key("0.3.36", "-DA=2")
    assert build_server.build_key("0.3.36", "-DA=1") == build_server.build_key("0.3.36", "-DA=1")
    monkeypatch.setattr(build_server, "installed_path", lambda: tmp_path / "bin" / "llama-server")
    assert build_server.find() is None
    with pytest.raises(BackendUnavailable, match="make setup-llama-server"):
        LocalLlamaServer(parallel=2)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "llama-server").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "llama-server").chmod(0o755)
    srv = LocalLlamaServer(parallel=3)
    assert srv.server_binary == tmp_path / "bin" / "llama-server"
