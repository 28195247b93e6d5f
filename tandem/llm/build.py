"""Build llama.cpp's own `llama-server` for any x86-64 machine, not only the one that builds it: the embedded LLM.

llama-server keeps several parallel slots (each its own conversation's prompt evaluated) and batches their
tokens into one forward pass (continuous batching), which is what many sessions sharing one small model
need; `tandem run` uses the same program with fewer slots, so there is one llama.cpp build to make.

A default llama.cpp build compiles for the building machine's own instruction set (GGML_NATIVE): a binary
built on a CPU with AVX-512 or AMX dies with SIGILL on the next one without. Here the flags are fixed
(ggml's x86-64-v3 baseline: AVX2, FMA, F16C, BMI2, which every x86-64 CPU since 2013-2015 has), and the
binary is cached under a key of the source, the flags and the compiler, so a changed flag builds anew and
an unchanged one is reused. The source is llama.cpp as vendored in the llama-cpp-python sdist on PyPI
(the one registry this must build from), checked against its SHA-256. The parts that do not run per
token (the HTTP server, its JSON, chat templates, the multimodal library) are compiled at -O1, ggml and
llama at -O3: the build takes about half as long and a token as long (docs/BENCHMARKS.md, "Set-up").

Standard library only (`make setup` runs it before anything else is installed):

    python -m tandem.llm.build              # build or reuse; installs <env>/bin/llama-server
    python -m tandem.llm.build --check-cpu  # only say whether this CPU can run the build
    python -m tandem.llm.build --force      # build again even when a cached binary exists

TANDEM_LLAMA_CMAKE_ARGS replaces the CPU flags (for example `-DGGML_NATIVE=ON` on a machine that only ever
runs its own build).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from ..runtime.cache import cache_root

SDIST = "llama_cpp_python"
VERSION = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
BINARY = "llama-server"

# what the fixed build uses, as /proc/cpuinfo names it
X86_REQUIRED = ("avx", "avx2", "fma", "f16c", "bmi2")
BASELINE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_F16C=ON -DGGML_FMA=ON "
                 "-DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF "
                 "-DGGML_AMX_BF16=OFF")
SERVER_ARGS = ("-DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
               "-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF "
               "-DCMAKE_BUILD_TYPE=Release")
# targets that run once per request, not per token: -O1 (added after the Release -O3, so it wins)
LIGHT_TARGETS = ("llama-common-base", "llama-common", "mtmd", "cpp-httplib", "server-context", "llama-server-impl",
                 "llama-server")
LIGHT_CMAKE = """cmake_minimum_required(VERSION 3.14)
if(NOT TANDEM_LIGHT_DEFERRED)
  set(TANDEM_LIGHT_DEFERRED ON)
  function(tandem_light)
    foreach(t {targets})
      if(TARGET ${{t}})
        target_compile_options(${{t}} PRIVATE -O1)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY ${{CMAKE_SOURCE_DIR}} CALL tandem_light)
endif()
"""
FIX = ("install a C++ compiler and cmake (apt-get install build-essential cmake), or point tandem at another "
       "OpenAI-compatible server with --llm-url")


class BuildFailed(Exception):
    """Why the build stopped, in one line that says what to do."""


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    m = re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.M)
    return set(m.group(1).split()) if m else set()


def missing_cpu_features(machine: str | None = None, flags: set[str] | None = None) -> list[str]:
    """What the fixed build needs that this CPU lacks ([] where the check does not apply)."""
    machine = machine or platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return []
    flags = cpu_flags() if flags is None else flags
    if not flags:  # no /proc/cpuinfo (not Linux): let the build and the start-up check speak
        return []
    return [f for f in X86_REQUIRED if f not in flags]


def cmake_args() -> str:
    override = os.environ.get("TANDEM_LLAMA_CMAKE_ARGS")
    if override is not None:
        return override.strip()
    if platform.machine() not in ("x86_64", "AMD64"):
        return "-DGGML_NATIVE=OFF"  # ggml's portable defaults for the architecture
    return BASELINE_ARGS


def build_key(version: str, args: str) -> str:
    tag = platform.machine()
    digest = hashlib.sha256(f"{version}|{args}|{SERVER_ARGS}|{LIGHT_TARGETS}|{tag}".encode()).hexdigest()[:12]
    return f"{version}-{tag}-{digest}"


def cache_dir() -> Path:
    return cache_root() / "llama-server"


def installed_path() -> Path:
    return Path(sys.prefix) / "bin" / BINARY


def find() -> Path | None:
    """The llama-server this environment has (installed by this module), or None."""
    p = installed_path()
    return p if p.exists() and os.access(p, os.X_OK) else None


def _run(cmd: list[str], log: Path, what: str) -> None:
    with log.open("ab") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise BuildFailed(f"{what} failed ({' | '.join(x.strip() for x in tail)[-300:]}); the whole log: {log}")


def fetch_source(dest: Path, log: Path) -> Path:
    """llama.cpp's source from the pinned sdist, its hash checked; returns the source directory."""
    _run([sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps", "--no-binary", ":all:",
          "--no-cache-dir", "-q", "-d", str(dest), f"{SDIST}=={VERSION}"], log, f"downloading {SDIST} {VERSION} from PyPI")
    sdists = list(dest.glob("*.tar.gz"))
    if len(sdists) != 1:
        raise BuildFailed(f"expected one {SDIST} sdist from PyPI, found {[p.name for p in sdists]}")
    digest = hashlib.sha256(sdists[0].read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise BuildFailed(f"{sdists[0].name} has SHA-256 {digest}, not the pinned {SDIST_SHA256}: the download "
                          "was changed or cut short; run the set-up again")
    with tarfile.open(sdists[0]) as tar:
        tar.extractall(dest, filter="data")
    src = dest / f"{SDIST}-{VERSION}" / "vendor" / "llama.cpp"
    if not (src / "tools" / "server").is_dir():
        raise BuildFailed(f"{sdists[0].name} holds no llama.cpp server sources")
    return src


def build(args: str, dest: Path, log: Path) -> Path:
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    with tempfile.TemporaryDirectory(prefix="tandem-llama-server-") as tmp:
        tmp_path = Path(tmp)
        t0 = time.monotonic()
        print(f"tandem: building {BINARY} (llama.cpp from {SDIST} {VERSION}) with {args}; about 10 min on 2 cores, "
              f"once (cached in {dest.parent}); log: {log}", flush=True)
        src = fetch_source(tmp_path, log)
        light = tmp_path / "tandem-light.cmake"
        light.write_text(LIGHT_CMAKE.format(targets=" ".join(LIGHT_TARGETS)))
        out = tmp_path / "build"
        _run(["cmake", "-S", str(src), "-B", str(out), *args.split(), *SERVER_ARGS.split(),
              f"-DCMAKE_PROJECT_INCLUDE={light}"], log, "configuring llama.cpp (cmake)")
        _run(["cmake", "--build", str(out), "--target", BINARY, "-j", jobs], log, f"compiling {BINARY}")
        binary = out / "bin" / BINARY
        if not binary.exists():
            raise BuildFailed(f"the build made no {binary}; the whole log: {log}")
        dest.mkdir(parents=True, exist_ok=True)
        final = dest / BINARY
        shutil.copy2(binary, final)
        print(f"tandem: built {BINARY} in {time.monotonic() - t0:.0f} s", flush=True)
    return final


def ensure(force: bool = False, quiet: bool = False) -> Path:
    """llama-server built (or taken from the cache) and installed into this interpreter's environment."""
    args = cmake_args()
    where = cache_dir() / build_key(VERSION, args)
    binary = where / BINARY
    target = installed_path()
    if not force and binary.exists() and target.exists() and target.read_bytes() == binary.read_bytes():
        if not quiet:
            print(f"tandem: {BINARY} already installed ({where.name})")
        return target
    if force or not binary.exists():
        if where.is_dir():
            shutil.rmtree(where)
        where.parent.mkdir(parents=True, exist_ok=True)
        binary = build(args, where, where.parent / f"{where.name}.log")
    elif not quiet:
        print(f"tandem: reusing the {BINARY} build {where.name} from {where}")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    if not quiet:
        print(f"tandem: {BINARY} installed at {target}")
    return target


def cpu_message(missing: list[str]) -> str:
    return (f"this CPU lacks {', '.join(missing)}, which the embedded LLM's portable build needs (x86-64-v3: "
            "AVX2, FMA, F16C, BMI2). Point tandem at another OpenAI-compatible server with --llm-url, or build "
            "llama.cpp for this CPU: TANDEM_LLAMA_CMAKE_ARGS='-DGGML_NATIVE=ON' make setup")


def refusal() -> str | None:
    """Why this machine cannot build or run the portable build (None: it can)."""
    missing = missing_cpu_features()
    if missing and "TANDEM_LLAMA_CMAKE_ARGS" not in os.environ:
        return cpu_message(missing)
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            return f"building the embedded LLM needs {tool}, which this machine lacks: {FIX}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tandem.llm.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check-cpu", action="store_true", help="only check that this CPU can run the build")
    ap.add_argument("--force", action="store_true", help="build again even when a cached binary exists")
    ap.add_argument("--quiet", action="store_true", help="say nothing when the right build is installed")
    opts = ap.parse_args(argv)
    why = refusal()
    if why is not None:
        print(f"tandem: set-up stops: {why}", file=sys.stderr)
        return 3
    if opts.check_cpu:
        print(f"tandem: this CPU runs the embedded LLM's portable build ({platform.machine()})")
        return 0
    try:
        ensure(force=opts.force, quiet=opts.quiet)
    except BuildFailed as e:
        print(f"tandem: set-up stops: building the embedded LLM ({BINARY}) failed: {e}. Fix that and run "
              f"`make setup` again, or use another OpenAI-compatible server with --llm-url", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
