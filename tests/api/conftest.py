"""A running tutor for the API's contract tests: uvicorn on a free port (real HTTP, real
middleware), and a worker that grades with the stand-in grader of tests/worker."""

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
import uvicorn

from app.accounts import sessions
from app.accounts.models import User
from app.config import Settings
from app.main import create_app
from tests.conftest import LESSONS
from tests.worker.test_queue import fake_verdict
from worker.runner import Worker


@dataclass
class Tutor:
    url: str
    app: object
    settings: Settings

    def api_token(self, email: str) -> str:
        """A bearer token for a new account, made straight in the database (no argon2 per token)."""
        with self.app.state.sessionmaker.begin() as session:
            user = session.query(User).filter_by(email=email).one_or_none()
            if user is None:
                user = User(email=email, password_hash="!", lang="en")
                session.add(user)
                session.flush()
            return sessions.start_session(session, user, kind="api", visitor_id=f"v-{email}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tutor(tmp_path_factory, _sqlite_template: Path, _course) -> Iterator[Tutor]:
    db = tmp_path_factory.mktemp("tutor") / "treino.db"
    shutil.copyfile(_sqlite_template, db)
    # the default poll: each one is a short write transaction on SQLite; more often, and a loaded
    # machine can keep a request waiting on the lock past the busy timeout
    settings = Settings(database_url=f"sqlite:///{db}", lessons_dir=LESSONS, _env_file=None)
    app = create_app(settings, course=_course)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{port}"
    with Worker(settings, grade=fake_verdict, course=_course) as worker:
        grading = threading.Thread(target=worker.run, daemon=True)
        grading.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx2.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, "the tutor did not become ready"
            time.sleep(0.1)
        yield Tutor(url=url, app=app, settings=settings)
        worker.stopping.set()
        grading.join(10)
    server.should_exit = True
    serving.join(10)
