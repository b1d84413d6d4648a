import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import ROOT, Settings
from app.db import upgrade
from app.lessons.content import Course, load_course
from app.main import create_app

LESSONS = ROOT / "lessons"
PG_URL = os.environ.get("TREINO_TEST_DATABASE_URL")
PASSWORD = "correct horse battery staple"


def html(response) -> BeautifulSoup:
    assert response.headers["content-type"].startswith("text/html"), response.headers
    return BeautifulSoup(response.text, "html.parser")


def csrf_token(client: TestClient) -> str:
    """The CSRF token of this client's pages, as htmx reads it from <body hx-headers>."""
    return json.loads(html(client.get("/sign-up")).body["hx-headers"])["X-CSRF-Token"]


def arm_csrf(client: TestClient) -> TestClient:
    """Send the token on every request, as htmx does (it changes with each sign-in)."""
    client.headers["X-CSRF-Token"] = csrf_token(client)
    return client


def sign_up(client: TestClient, email: str, password: str = PASSWORD):
    response = client.post("/sign-up", data={"email": email, "password": password},
                           follow_redirects=False)
    assert response.status_code == 303, response.text
    arm_csrf(client)
    return response


def sign_in(client: TestClient, email: str, password: str = PASSWORD):
    response = client.post("/sign-in", data={"email": email, "password": password},
                           follow_redirects=False)
    assert response.status_code == 303, response.text
    arm_csrf(client)
    return response


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


@contextmanager
def _pg_database(template: str | None = None) -> Iterator[str]:
    """A new PostgreSQL database (a copy of `template` if given), dropped afterwards."""
    if not PG_URL:
        pytest.fail("TREINO_TEST_DATABASE_URL is not set: the PostgreSQL tier needs a server "
                    "(CI sets it; locally: postgresql+psycopg://postgres@127.0.0.1:5432/test)")
    name = f"treino_test_{secrets.token_hex(6)}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    with _pg_database() as url:
        yield url


@pytest.fixture(scope="session")
def _postgres_template() -> Iterator[str]:
    with _pg_database() as url:
        upgrade(url)
        yield make_url(url).database


@pytest.fixture
def postgres_url(_postgres_template: str) -> Iterator[str]:
    """A migrated PostgreSQL database of this test's own."""
    with _pg_database(template=_postgres_template) as url:
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
def db_app(database_url: str, _course: Course):
    """The app on SQLite and, in a second run, on the real PostgreSQL."""
    app = create_app(Settings(database_url=database_url, lessons_dir=LESSONS, _env_file=None),
                     course=_course)
    yield app
    for factory in (app.state.sessionmaker, app.state.reader):  # tests may query outside the lifespan
        factory.kw["bind"].dispose()


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
