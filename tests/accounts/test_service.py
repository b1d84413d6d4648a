"""Sign-in and sign-up throttling, on SQLite and on PostgreSQL."""

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from app.accounts import service
from app.accounts.models import ThrottleHit
from app.db import utcnow
from app.main import create_app
from tests.conftest import PASSWORD, html


@pytest.fixture
def small_limits(monkeypatch):
    monkeypatch.setattr(service, "SIGN_IN_FAILURES_PER_EMAIL", 3)
    monkeypatch.setattr(service, "SIGN_IN_FAILURES_PER_IP", 5)


def _fail(client: TestClient, email: str):
    return client.post("/api/tokens", json={"email": email, "password": "not the password"})


def test_sign_in_is_throttled_per_address_in_the_database(db_client, db_app, small_limits):
    db_client.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
    assert [_fail(db_client, "ana@example.com").status_code for _ in range(3)] == [401] * 3
    response = db_client.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD})
    assert response.status_code == 429, "even the right password waits"
    assert response.json() == {
        "code": "throttled",
        "detail": None,
        "message": "Too many attempts. Try again in 15 minutes.",
    }
    assert 14 * 60 < int(response.headers["Retry-After"]) <= 15 * 60
    # The count is in the database: a second app (another process) sees it too.
    with TestClient(create_app(db_app.state.settings)) as other:
        assert (
            other.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}).status_code
            == 429
        )
    page = db_client.post(
        "/sign-in", params={"lang": "pt-BR"}, data={"email": "ana@example.com", "password": PASSWORD}
    )
    assert page.status_code == 429
    assert html(page).select_one(".form-error").get_text(strip=True) == (
        "Tentativas demais. Tente de novo em 15 minutos."
    )
    with db_app.state.sessionmaker() as db, db.begin():  # the window passes
        db.execute(update(ThrottleHit).values(created_at=utcnow() - timedelta(minutes=16)))
    assert (
        db_client.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}).status_code
        == 201
    )


def test_sign_in_is_throttled_per_client_address(db_client, small_limits):
    for i in range(5):
        assert _fail(db_client, f"someone{i}@example.com").status_code == 401
    assert _fail(db_client, "someone-else@example.com").status_code == 429


def test_a_success_clears_the_address_count_but_not_the_client_count(db_client, db_app, small_limits):
    db_client.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
    for _ in range(2):
        _fail(db_client, "ana@example.com")
    assert (
        db_client.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}).status_code
        == 201
    )
    with db_app.state.sessionmaker() as db:
        keys = db.scalars(select(ThrottleHit.key).where(ThrottleHit.key.startswith("signin"))).all()
    assert keys == ["signin-ip:testclient"] * 2, "no e-mail address is stored in the keys"


def test_sign_ups_are_throttled_per_client_address(db_client, monkeypatch):
    monkeypatch.setattr(service, "SIGN_UPS_PER_IP", 2)
    for i in range(2):
        assert (
            db_client.post(
                "/api/accounts", json={"email": f"a{i}@example.com", "password": PASSWORD}
            ).status_code
            == 201
        )
    response = db_client.post("/api/accounts", json={"email": "a9@example.com", "password": PASSWORD})
    assert response.status_code == 429
    assert response.json() == {
        "code": "throttled",
        "detail": None,
        "message": "Too many attempts. Try again in 60 minutes.",
    }
