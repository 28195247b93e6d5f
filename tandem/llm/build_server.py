"""Build llama.cpp's own `llama-server` for any x86-64 machine, from the llama-cpp-python sdist.

llama-cpp-python's server answers one request at a time; llama.cpp's own server keeps several
parallel slots and batches their tokens into one forward pass (continuous batching), which is what
many sessions sharing one small model need. Its source ships inside the same sdist that `make setup`
already compiles (`vendor/llama.cpp`), so it is built here with the same fixed flags (ggml's
x86-64-v3 baseline, never the building machine's own instruction set), no web UI, no TLS, and
cached under a key of version and flags:

    python -m tandem.llm.build_server            # build or reuse; installs <env>/bin/llama-server
    python -m tandem.llm.build_server --force    # build again

Standard library only, like tandem.llm.build. Takes about 25 minutes on 2 cores the first time.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from .build import PACKAGE, cache_root, cmake_args, cpu_refusal, locked_version

SERVER_ARGS = ("-DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
               "-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF "
               "-DCMAKE_BUILD_TYPE=Release")
BINARY = "llama-server"


def cache_dir() -> Path:
    return cache_root() / "llama-server"


def build_key(version: str, args: str) -> str:
    return f"{version}-" + hashlib.sha256(f"{version}|{args}|{SERVER_ARGS}".encode()).hexdigest()[:12]


def installed_path() -> Path:
    return Path(sys.prefix) / "bin" / BINARY


def find() -> Path | None:
    """The llama-server this environment has (installed by this module), or None."""
    p = installed_path()
    return p if p.exists() and os.access(p, os.X_OK) else None


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    r = subprocess.run(cmd, cwd=cwd)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")


def build(version: str, args: str, dest: Path) -> Path:
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    with tempfile.TemporaryDirectory(prefix="tandem-llama-server-") as tmp:
        tmp_path = Path(tmp)
        print(f"tandem: building {BINARY} from {PACKAGE} {version}'s llama.cpp with {args} (about 25 min on 2 cores)",
              flush=True)
        _run([sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps", "--no-binary",
              ":all:", "--no-cache-dir", "-q", "-d", tmp, f"{PACKAGE}=={version}"])
        sdists = list(tmp_path.glob("*.tar.gz"))
        if len(sdists) != 1:
            raise SystemExit(f"expected one sdist, found {sdists}")
        with tarfile.open(sdists[0]) as tar:
            tar.extractall(tmp_path, filter="data")
        src = next(tmp_path.glob(f"{PACKAGE}-{version}")) / "vendor" / "llama.cpp"
        if not (src / "tools" / "server").is_dir():
            raise SystemExit(f"{sdists[0].name} holds no llama.cpp server sources")
        out = tmp_path / "build"
        _run(["cmake", "-S", str(src), "-B", str(out), *args.split(), *SERVER_ARGS.split()])
        _run(["cmake", "--build", str(out), "--target", BINARY, "-j", jobs])
        binary = out / "bin" / BINARY
        if not binary.exists():
            raise SystemExit(f"the build made no {binary}")
        dest.mkdir(parents=True, exist_ok=True)
        final = dest / BINARY
        shutil.copy2(binary, final)
    return final


def ensure(force: bool = False) -> Path:
    version = locked_version()
    args = cmake_args()
    where = cache_dir() / build_key(version, args)
    binary = where / BINARY
    if force or not binary.exists():
        if where.is_dir():
            shutil.rmtree(where)
        binary = build(version, args, where)
    else:
        print(f"tandem: reusing the {BINARY} build {where.name} from {where}")
    target = installed_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    print(f"tandem: {BINARY} installed at {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tandem.llm.build_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="build again even when a cached binary exists")
    args = ap.parse_args(argv)
    refused = cpu_refusal("building llama-server")
    if refused is not None:
        return refused
    if shutil.which("cmake") is None:
        print("tandem: building llama-server needs cmake (apt-get install cmake)", file=sys.stderr)
        return 3
    ensure(force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
