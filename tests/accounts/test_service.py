"""Sign-in and sign-up throttling, on SQLite and on PostgreSQL."""

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from app.accounts import service, throttling
from app.accounts.models import ThrottleHit
from app.db import utcnow
from app.main import create_app
from tests.conftest import PASSWORD, arm_csrf, html, sign_up


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
    assert sorted(k.split(":")[0] for k in keys) == ["signin-email"] * 2 + ["signin-ip"] * 2
    assert not any("ana" in k for k in keys), "no e-mail address is stored in the keys"


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


def _age_hits(app, seconds: float) -> None:
    """Every counted use happened `seconds` earlier (time passes)."""
    with app.state.sessionmaker.begin() as db:
        for hit in db.scalars(select(ThrottleHit)):
            hit.created_at = hit.created_at - timedelta(seconds=seconds)


def test_guessing_one_account_from_many_addresses_is_slowed_and_the_owner_still_signs_in(db_app, monkeypatch):
    """Each guess from an address of its own (the per-address limits never see two): past five
    failures each try waits twice as long as the one before, for every address but the owner's
    own browser, which signed in there before. The limits' clock stands still but where moved."""
    now = utcnow()
    monkeypatch.setattr(throttling, "utcnow", lambda: now)
    wrong = {"email": "ana@example.com", "password": "not the password"}
    with TestClient(db_app, client=("198.51.100.7", 5000)) as owner:
        arm_csrf(owner)
        sign_up(owner, "ana@example.com")
        owner.post("/sign-out")
        arm_csrf(owner)

        def guess(n: int):
            with TestClient(db_app, client=(f"203.0.113.{n}", 5000)) as attacker:
                return attacker.post("/api/tokens", json=wrong)

        answers = [guess(n) for n in range(1, 31)]
        assert [a.status_code for a in answers] == [401] * 5 + [429] * 25, "5 of 30 guesses tried"
        assert answers[5].headers["Retry-After"] == "1"
        assert answers[5].json()["message"] == "Too many attempts. Try again in 1 second."
        waits = []
        for n in range(3):  # wait out each delay: the next one is twice as long
            _age_hits(db_app, 2**n)
            assert guess(40 + n).status_code == 401
            waits.append(int(guess(50 + n).headers["Retry-After"]))
        assert waits == [2, 4, 8]
        with TestClient(db_app, client=("192.0.2.1", 5000)) as elsewhere:  # no cookie: waits too
            right = {"email": "ana@example.com", "password": PASSWORD}
            assert elsewhere.post("/api/tokens", json=right).status_code == 429
        page = owner.post(
            "/sign-in", data={"email": "ana@example.com", "password": PASSWORD}, follow_redirects=False
        )
        assert page.status_code == 303, "the owner's own browser does not wait"


def test_an_unknown_address_is_slowed_exactly_as_a_registered_one(db_app):
    def statuses(email: str) -> list[int]:
        out = []
        for n in range(7):
            with TestClient(db_app, client=(f"203.0.113.{n}", 5000)) as c:
                out.append(c.post("/api/tokens", json={"email": email, "password": "nope nope"}).status_code)
        return out

    with TestClient(db_app) as c:
        c.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
    assert statuses("ana@example.com") == statuses("nobody@example.com") == [401] * 5 + [429] * 2
