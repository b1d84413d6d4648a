import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from app.config import ROOT, Settings
from app.db import upgrade
from app.lessons.course import Course, load_course
from app.main import create_app

LESSONS = ROOT / "lessons"
PG_URL = os.environ.get("TREINO_TEST_DATABASE_URL")
PASSWORD = "correct horse battery staple"


def html(response) -> BeautifulSoup:
    assert response.headers["content-type"].startswith("text/html"), response.headers
    return BeautifulSoup(response.text, "html.parser")


def csrf_token(client: TestClient) -> str:
    """The CSRF token of this client's pages, as htmx reads it from <body hx-headers>."""
    body = html(client.get("/sign-up")).body
    assert body is not None
    return json.loads(str(body["hx-headers"]))["X-CSRF-Token"]


def arm_csrf(client: TestClient) -> TestClient:
    """Send the token on every request, as htmx does (it changes with each sign-in)."""
    client.headers["X-CSRF-Token"] = csrf_token(client)
    return client


def sign_up(client: TestClient, email: str, password: str = PASSWORD):
    response = client.post("/sign-up", data={"email": email, "password": password}, follow_redirects=False)
    assert response.status_code == 303, response.text
    arm_csrf(client)
    return response


def sign_in(client: TestClient, email: str, password: str = PASSWORD):
    response = client.post("/sign-in", data={"email": email, "password": password}, follow_redirects=False)
    assert response.status_code == 303, response.text
    arm_csrf(client)
    return response


@pytest.fixture
def cli_keeps_pytest_logging(monkeypatch):
    """For a test that calls ``worker.cli.main`` in-process: its ``logs.setup`` would route every
    logger to this test's captured stderr, which closes when the test ends (a later test's worker
    thread then logs into a closed file), and would take pytest's log capture away."""
    monkeypatch.setattr("app.logs.setup", lambda _format: None)


@pytest.fixture
def empty_sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'empty.db'}"


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory) -> Path:
    """Migrated once per run; each test gets a copy (migrating costs seconds, copying nothing)."""
    path = tmp_path_factory.mktemp("template") / "treino.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, _sqlite_template: Path) -> str:
    """A migrated SQLite database of this test's own."""
    target = tmp_path / "treino.db"
    shutil.copyfile(_sqlite_template, target)
    return f"sqlite:///{target}"


def _postgres_bindir() -> Path | None:
    """Where the system's PostgreSQL server binaries are: beside initdb on PATH, else Debian's newest."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    return found[-1].parent if found else None


PG_BINDIR = None if PG_URL else _postgres_bindir()
_PG_LEFT_OUT = pytest.StashKey[int]()


def pytest_collection_modifyitems(config, items):
    """Without a server to use or to start, the PostgreSQL tier is left out, said in one line."""
    if PG_URL or PG_BINDIR:
        return
    left_out = [item for item in items if item.get_closest_marker("postgres")]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not item.get_closest_marker("postgres")]
        config.stash[_PG_LEFT_OUT] = len(left_out)


def pytest_terminal_summary(terminalreporter, config):
    if left_out := config.stash.get(_PG_LEFT_OUT, 0):
        terminalreporter.write_line(
            f"PostgreSQL tier skipped ({left_out} tests): no PostgreSQL server binaries (initdb) on PATH "
            "or in /usr/lib/postgresql/*/bin; `make system-deps` as root installs them (Debian: "
            "postgresql), or set TREINO_TEST_DATABASE_URL to a server of yours"
        )


@contextmanager
def _throwaway_postgres(bindir: Path) -> Iterator[str]:
    """A PostgreSQL server of this run's own, in a temp directory: reached only by the unix socket
    there (no TCP port, so nothing to collide with), fsync off, removed at the end. Postgres refuses
    to run as root: as root, it runs as nobody."""
    root = Path(tempfile.mkdtemp(prefix="treino-pg-"))
    as_user: dict[str, Any] = {}
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
        as_user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    data, log = root / "data", root / "server.log"
    server = None
    try:
        init = subprocess.run(
            [
                bindir / "initdb",
                "-D",
                data,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ],
            cwd=root,
            capture_output=True,
            text=True,
            **as_user,
        )
        assert init.returncode == 0, f"initdb failed:\n{init.stdout}{init.stderr}"
        with open(log, "wb") as out:
            server = subprocess.Popen(
                [
                    bindir / "postgres",
                    "-D",
                    data,
                    "-k",
                    root,
                    "-c",
                    "listen_addresses=",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                ],
                cwd=root,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                **as_user,
            )
        url = f"postgresql+psycopg://postgres@/postgres?host={root}"
        probe = create_engine(url, poolclass=NullPool)
        deadline = time.monotonic() + 120
        while True:  # ready once it takes a connection; a server that exits says why in its log
            assert server.poll() is None, f"postgres exited:\n{log.read_text(errors='replace')}"
            try:
                probe.connect().close()
                break
            except OperationalError:
                assert time.monotonic() < deadline, f"postgres not ready:\n{log.read_text(errors='replace')}"
                time.sleep(0.1)
        probe.dispose()
        yield url
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGINT)  # fast shutdown: clients cut, no checkpoint wait
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def _pg_server() -> Iterator[str]:
    """The PostgreSQL tier's server: TREINO_TEST_DATABASE_URL when given (CI), else a throwaway one
    started from the system's binaries (without either, the tier is left out at collection)."""
    if PG_URL:
        yield PG_URL
        return
    assert PG_BINDIR is not None  # else the tier was left out at collection
    with _throwaway_postgres(PG_BINDIR) as url:
        yield url


@contextmanager
def _pg_database(server: str, template: str | None = None) -> Iterator[str]:
    """A new PostgreSQL database on `server` (a copy of `template` if given), dropped afterwards."""
    name = f"treino_test_{secrets.token_hex(6)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def empty_postgres_url(_pg_server: str) -> Iterator[str]:
    with _pg_database(_pg_server) as url:
        yield url


@pytest.fixture(scope="session")
def _postgres_template(_pg_server: str) -> Iterator[str]:
    with _pg_database(_pg_server) as url:
        upgrade(url)
        name = make_url(url).database
        assert name is not None
        yield name


@pytest.fixture
def postgres_url(_pg_server: str, _postgres_template: str) -> Iterator[str]:
    """A migrated PostgreSQL database of this test's own."""
    with _pg_database(_pg_server, template=_postgres_template) as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_database_url(request) -> str:
    """An empty database, on SQLite and on the real PostgreSQL."""
    return request.getfixturevalue(f"empty_{request.param}_url")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request) -> str:
    """A migrated database: each such test runs on SQLite and on the real PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def settings(sqlite_url: str) -> Settings:
    return Settings(database_url=sqlite_url, lessons_dir=LESSONS, _env_file=None)


@pytest.fixture
def app(settings: Settings, _course: Course):
    return create_app(settings, course=_course)


@pytest.fixture
def client(app) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield arm_csrf(c)


@pytest.fixture
def make_db_app(database_url: str, _course: Course):
    """``make_db_app(**settings)``: the app with settings of the test's own (a limit made small to
    reach it), on SQLite and, in a second run, on the real PostgreSQL."""
    apps = []

    def make(**overrides: Any):
        values = Settings(database_url=database_url, lessons_dir=LESSONS, _env_file=None, **overrides)
        apps.append(create_app(values, course=_course))
        return apps[-1]

    yield make
    for app in apps:
        for factory in (app.state.sessionmaker, app.state.reader):  # tests may query outside the lifespan
            factory.kw["bind"].dispose()


@pytest.fixture
def db_app(make_db_app):
    """The app on SQLite and, in a second run, on the real PostgreSQL."""
    return make_db_app()


@pytest.fixture
def db_client(db_app) -> Iterator[TestClient]:
    with TestClient(db_app) as c:
        yield arm_csrf(c)


@pytest.fixture(scope="session")
def _course() -> Course:
    return load_course(LESSONS)


@pytest.fixture
def course(app):
    return app.state.course
