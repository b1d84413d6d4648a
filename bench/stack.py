"""The tutor as deployed, started for a measurement and stopped after it: a scratch database,
`treino serve --no-worker` on a free loopback port, and `treino worker` processes."""

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import ROOT

SECRET = "bench-only-secret-key"

POSTGRES_URL = os.environ.get(
    "TREINO_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def scratch_database(backend: str, folder: Path) -> Iterator[str]:
    """A new, migrated database of ``backend`` (sqlite|postgresql), gone afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'bench.db'}"
        return
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    name = f"treino_bench_{secrets.token_hex(4)}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


class Process:
    """A `treino` subcommand in its own session, its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "worker.cli", *args],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{tail}")

    def stop(self) -> None:
        """SIGTERM (a worker finishes its job and closes its pool), then the whole group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything it left in its session
        self.proc.wait()


class Stack:
    """A database, the web, and workers added on demand; ``close`` stops them all."""

    def __init__(self, backend: str, pool_size: int, start: str = "exec") -> None:
        """``start``: how its workers start sandboxes (``TREINO_SANDBOX_START``, exec|fork)."""
        self.backend, self.pool_size, self.start = backend, pool_size, start
        self._exit = contextlib.ExitStack()
        self.folder = Path(tempfile.mkdtemp(prefix=f"treino-bench-{backend}-"))
        self._exit.callback(shutil.rmtree, self.folder, ignore_errors=True)
        self.web: Process | None = None
        self.workers: list[Process] = []

    def __enter__(self) -> "Stack":
        try:
            self.url = self._exit.enter_context(scratch_database(self.backend, self.folder))
            self.env = {
                **os.environ,
                "TREINO_DATABASE_URL": self.url,
                "TREINO_POOL_SIZE": str(self.pool_size),
                "TREINO_LOG_FORMAT": "text",
                "TREINO_SANDBOX_START": self.start,
                "TREINO_SECRET_KEY": SECRET,  # the bench signs a page's wait URLs with it
                # what is measured is grading, not the fair-use limit of one address
                "TREINO_SUBMISSIONS_PER_IP": "100000",
                # the bench is the local proxy: learners' own addresses come as X-Forwarded-For
                "TREINO_FORWARDED_ALLOW_IPS": "127.0.0.1",
            }
            subprocess.run(
                [sys.executable, "-m", "worker.cli", "db", "upgrade"],
                cwd=ROOT,
                env=self.env,
                check=True,
                capture_output=True,
            )
            self.port = free_port()
            self.base = f"http://127.0.0.1:{self.port}"
            self.web = self._start("web", ["serve", "--no-worker", "--port", str(self.port)])
            self._wait_web()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _start(self, name: str, args: list[str]) -> Process:
        process = Process(name, args, self.env, self.folder)
        self._exit.callback(process.stop)
        return process

    def _wait_web(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.web is not None
            self.web.check()
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(f"{self.base}/healthz", timeout=1, trust_env=False).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the web did not answer within {timeout:.0f} s")

    @property
    def warm(self) -> int:
        """Harness processes a quiet worker holds: its warm pool, or its one template."""
        return 1 if self.start == "fork" else self.pool_size

    def add_worker(self) -> Process:
        worker = self._start(f"worker-{len(self.workers) + 1}", ["worker"])
        self.workers.append(worker)
        return worker

    def database(self):
        """An engine on the scratch database (the caller disposes of it)."""
        return create_engine(self.url)

    def close(self) -> None:
        self._exit.close()
