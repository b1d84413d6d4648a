"""SIGTERM or SIGINT to `treino serve` (what an init system or Ctrl-C sends), or even SIGKILL,
ends everything it started: the web, its supervised worker, and the worker's warm sandboxes."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.config import ROOT
from worker.cli import WORKER_NICENESS

pytestmark = pytest.mark.slow  # a real worker with a warm pool


def _descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every process below ``pid`` (the start time tells a reused pid apart)."""
    found, stack = {}, [pid]
    while stack:
        current = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                found[child] = _started(child)
                stack.append(child)
    return found


def _started(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_signal_to_serve_leaves_nothing_running(tmp_path, signum):
    env = {
        **os.environ,
        "TREINO_DATABASE_URL": f"sqlite:///{tmp_path / 'treino.db'}",
        "TREINO_POOL_SIZE": "2",
    }
    port = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "worker.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        tree: dict[int, str] = {}
        warm = 0
        # the worker and its sandboxes (bwrap or not): two warm ones, or a fork server's template;
        # counted once per look (a second reading of /proc can catch a bwrap process between two
        # states and read one fewer: it failed a fresh clone so)
        while time.monotonic() < deadline:
            tree = _descendants(serve.pid)
            warm = sum(_harness(p) for p in tree)
            if warm >= 2 and _listening(port):
                break
            time.sleep(0.2)
        assert warm >= 2, "no warm sandbox appeared"
        tree = _descendants(serve.pid)
        # grading yields the CPU to the web: the worker and its sandboxes run niced, the web not
        web = os.getpriority(os.PRIO_PROCESS, serve.pid)
        graders = [os.getpriority(os.PRIO_PROCESS, p) for p in tree if _harness(p)]
        assert graders and min(graders) >= max(web, WORKER_NICENESS), (web, graders)
        serve.send_signal(signum)
        # SIGKILL leaves serve no say: its worker is told by the kernel (PR_SET_PDEATHSIG)
        assert serve.wait(timeout=60) == (-signal.SIGKILL if signum == signal.SIGKILL else 0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            alive = {p: _cmdline(p) for p, start in tree.items() if start and _started(p) == start}
            if not alive:
                break
            time.sleep(0.1)
        assert not alive, f"left running after the signal: {alive}"
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _harness(pid: int) -> bool:
    """Whether ``pid`` runs the sandbox's harness: a single-use sandbox or a template."""
    return any(name in _cmdline(pid) for name in ("-m harness.run ", "-m harness.template "))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
