"""Entry point of the embedded LLM server process: llama-cpp-python's OpenAI-compatible server.

A llama.cpp built with ggml's runtime CPU dispatch (GGML_BACKEND_DL, `TANDEM_LLAMA_BUILD=dispatch`)
ships its CPU code as one library per instruction set and loads none until asked; llama-cpp-python
does not ask, so the model would find no device. Here the best variant for this CPU is loaded first.
"""
from __future__ import annotations

import ctypes
from pathlib import Path


def load_dispatched_backends() -> bool:
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib"
    if not any(lib.glob("libggml-cpu-*.so")):
        return False  # a fixed build: its CPU code is linked in
    # the copy libllama itself loaded (by its soname): wheels carry no symlinks, so libggml.so is
    # another file, and loading it would register the backends in a second ggml nobody uses
    name = next((n for n in ("libggml.so.0", "libggml.so") if (lib / n).exists()))
    ggml = ctypes.CDLL(str(lib / name))
    ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load_all_from_path(str(lib).encode())
    return True


def main() -> None:
    load_dispatched_backends()
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
