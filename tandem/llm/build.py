"""Build and install llama-cpp-python for any x86-64 machine, not only the one that builds it.

`pip install llama-cpp-python` compiles llama.cpp with the build machine's own instruction set
(GGML_NATIVE): a wheel built on a CPU that advertises AVX-512 or AMX dies with SIGILL on the next
one that does not, and pip caches that wheel by name and version, so changing the flags later
does not help. Here the flags are fixed (ggml's x86-64-v3 baseline: AVX2, FMA, F16C, BMI2, which
every x86-64 CPU since 2013-2015 has) and the wheel is cached under a key made of the version,
the flags and the Python tag, so a changed flag builds anew and an unchanged one is reused.

Runs with the standard library only (`make setup` runs it before anything else is installed):

    python -m tandem.llm.build                 # build or reuse, install into this interpreter's env
    python -m tandem.llm.build --check-cpu     # only say whether this CPU can run the build
    python -m tandem.llm.build --force         # rebuild even when a cached wheel exists

TANDEM_LLAMA_CMAKE_ARGS replaces the flags (for example `-DGGML_NATIVE=ON` on a machine that only
ever runs its own build). ggml's runtime CPU dispatch was measured against this build and not chosen
(docs/BENCHMARKS.md, "The embedded LLM build": no faster here, three times the build, and
llama-cpp-python does not package its CPU libraries).
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
import tempfile
from pathlib import Path

from ..cache import cache_root

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "llama_cpp_python"

# what the fixed build uses, as /proc/cpuinfo names it
X86_REQUIRED = ("avx", "avx2", "fma", "f16c", "bmi2")
BASELINE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_F16C=ON -DGGML_FMA=ON "
                 "-DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF "
                 "-DGGML_AMX_BF16=OFF")
MARKER = "tandem-llama-build.txt"  # in the environment's prefix: the key of the installed build


PINNED = "0.3.36"  # the version requirements.lock pins (a test keeps the two equal)


def locked_version(lock: Path = ROOT / "requirements.lock") -> str:
    """The lock's version in a checkout; PINNED where tandem was installed without its repository."""
    if not lock.exists():
        return PINNED
    m = re.search(r"^llama[_-]cpp[_-]python==([^\s;]+)", lock.read_text(), re.M | re.I)
    if not m:
        raise SystemExit(f"{lock} pins no llama_cpp_python version")
    return m.group(1)


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
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}-{platform.machine()}"
    return f"{version}-{tag}-" + hashlib.sha256(f"{version}|{args}|{tag}".encode()).hexdigest()[:12]


def cache_dir() -> Path:
    return cache_root() / "llama-wheels"


def installed_key() -> str | None:
    try:
        return (Path(sys.prefix) / MARKER).read_text().strip()
    except OSError:
        return None


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    r = subprocess.run(cmd, env=env)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")


def build_wheel(version: str, args: str, dest: Path) -> Path:
    env = dict(os.environ, CMAKE_ARGS=args, FORCE_CMAKE="1",
               CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2)))
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tandem-llama-") as tmp:
        print(f"tandem: building {PACKAGE} {version} from source with {args} (5-10 min on 2 cores)", flush=True)
        # --no-cache-dir: pip's own cache keys a built wheel by name and version only, so it would
        # hand back a build made with other flags
        _pip("wheel", "--no-deps", "--no-cache-dir", "--no-binary", PACKAGE, "-w", tmp, f"{PACKAGE}=={version}", env=env)
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"expected one wheel from the build, found {wheels}")
        final = dest / wheels[0].name
        shutil.move(str(wheels[0]), final)
    return final


def ensure(force: bool = False, quiet: bool = False) -> str:
    """Install the portable build into this interpreter's environment; returns its key."""
    version = locked_version()
    args = cmake_args()
    key = build_key(version, args)
    if not force and installed_key() == key:
        if not quiet:
            print(f"tandem: {PACKAGE} {version} already installed with {args}")
        return key
    where = cache_dir() / key
    wheels = sorted(where.glob("*.whl")) if where.is_dir() else []
    if force or not wheels:
        if where.is_dir():
            shutil.rmtree(where)
        wheels = [build_wheel(version, args, where)]
    else:
        print(f"tandem: reusing the {PACKAGE} build {key} from {where}")
    _pip("install", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheels[0]))
    (Path(sys.prefix) / MARKER).write_text(key + "\n")
    return key


def cpu_message(missing: list[str]) -> str:
    return (f"this CPU lacks {', '.join(missing)}, which the embedded LLM's portable build needs (x86-64-v3: "
            "AVX2, FMA, F16C, BMI2). Point tandem at another OpenAI-compatible server with --llm-url, or build "
            "llama.cpp for this CPU: TANDEM_LLAMA_CMAKE_ARGS='-DGGML_NATIVE=ON' make setup")


def cpu_refusal(what: str = "setup") -> int | None:
    """3 (after saying why) when this CPU cannot run the portable build and no flags were given, else None."""
    missing = missing_cpu_features()
    if missing and "TANDEM_LLAMA_CMAKE_ARGS" not in os.environ:
        print(f"tandem: {what} stops: {cpu_message(missing)}", file=sys.stderr)
        return 3
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tandem.llm.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check-cpu", action="store_true", help="only check that this CPU can run the build")
    ap.add_argument("--force", action="store_true", help="build again even when a cached wheel exists")
    ap.add_argument("--quiet", action="store_true", help="say nothing when the right build is installed")
    args = ap.parse_args(argv)
    refused = cpu_refusal()
    if refused is not None:
        return refused
    if args.check_cpu:
        print(f"tandem: this CPU runs the embedded LLM's portable build ({platform.machine()})")
        return 0
    ensure(force=args.force, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
