import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import ROOT, Settings
from app.db import upgrade
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
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'treino.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    if not PG_URL:
        pytest.fail("TREINO_TEST_DATABASE_URL is not set: the PostgreSQL tier needs a server "
                    "(CI sets it; locally: postgresql+psycopg://postgres@127.0.0.1:5432/test)")
    name = f"treino_test_{secrets.token_hex(6)}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request) -> str:
    """Each database test runs on SQLite and on the real PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def settings(sqlite_url: str) -> Settings:
    return Settings(database_url=sqlite_url, lessons_dir=LESSONS, _env_file=None)


@pytest.fixture
def app(settings: Settings):
    upgrade(settings.database_url)
    return create_app(settings)


@pytest.fixture
def client(app) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield arm_csrf(c)


@pytest.fixture
def db_app(database_url: str):
    """The app on SQLite and, in a second run, on the real PostgreSQL."""
    upgrade(database_url)
    app = create_app(Settings(database_url=database_url, lessons_dir=LESSONS, _env_file=None))
    yield app
    app.state.sessionmaker.kw["bind"].dispose()  # tests may query it outside the app's lifespan


@pytest.fixture
def db_client(db_app) -> Iterator[TestClient]:
    with TestClient(db_app) as c:
        yield arm_csrf(c)


@pytest.fixture
def course(app):
    return app.state.course
