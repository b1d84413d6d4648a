"""Throttling, ownership and adoption, on SQLite and on PostgreSQL."""

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from app.accounts import service
from app.accounts.models import ThrottleHit, User
from app.accounts.service import Learner, adopt, owned_by
from app.db import utcnow
from app.main import create_app
from app.progress.models import CardReached
from app.quizzes.models import QuizAttempt
from tests.conftest import PASSWORD, arm_csrf, html, sign_in, sign_up

HTMX = {"HX-Request": "true"}


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
    assert response.json() == {"code": "throttled", "detail": None,
                               "message": "Too many attempts. Try again in 15 minutes."}
    assert 14 * 60 < int(response.headers["Retry-After"]) <= 15 * 60
    # The count is in the database: a second app (another process) sees it too.
    with TestClient(create_app(db_app.state.settings)) as other:
        assert other.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}
                          ).status_code == 429
    page = db_client.post("/sign-in", params={"lang": "pt-BR"},
                          data={"email": "ana@example.com", "password": PASSWORD})
    assert page.status_code == 429
    assert html(page).select_one(".form-error").get_text(strip=True) == (
        "Tentativas demais. Tente de novo em 15 minutos.")
    with db_app.state.sessionmaker() as db, db.begin():  # the window passes
        db.execute(update(ThrottleHit).values(created_at=utcnow() - timedelta(minutes=16)))
    assert db_client.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}
                          ).status_code == 201


def test_sign_in_is_throttled_per_client_address(db_client, small_limits):
    for i in range(5):
        assert _fail(db_client, f"someone{i}@example.com").status_code == 401
    assert _fail(db_client, "someone-else@example.com").status_code == 429


def test_a_success_clears_the_address_count_but_not_the_client_count(db_client, db_app, small_limits):
    db_client.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
    for _ in range(2):
        _fail(db_client, "ana@example.com")
    assert db_client.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}
                          ).status_code == 201
    with db_app.state.sessionmaker() as db:
        keys = db.scalars(select(ThrottleHit.key).where(ThrottleHit.key.startswith("signin"))).all()
    assert keys == ["signin-ip:testclient"] * 2, "no e-mail address is stored in the keys"


def test_sign_ups_are_throttled_per_client_address(db_client, monkeypatch):
    monkeypatch.setattr(service, "SIGN_UPS_PER_IP", 2)
    for i in range(2):
        assert db_client.post("/api/accounts", json={"email": f"a{i}@example.com", "password": PASSWORD}
                              ).status_code == 201
    response = db_client.post("/api/accounts", json={"email": "a9@example.com", "password": PASSWORD})
    assert response.status_code == 429
    assert response.json() == {"code": "throttled", "detail": None,
                               "message": "Too many attempts. Try again in 60 minutes."}


def _rows(app, model):
    with app.state.sessionmaker() as db:
        return db.scalars(select(model).order_by(model.id)).all()


def _do_things(client: TestClient, course, slug: str = "bottleneck") -> None:
    lesson = course.lesson(slug)
    client.post(f"/lessons/{slug}/cards/2", headers=HTMX)
    question = lesson.questions[0]
    client.post(f"/lessons/{slug}/quiz/{question.id}", data={"option": question.correct_option.id},
                headers=HTMX)


def test_sign_up_adopts_everything_done_anonymously(db_client, db_app):
    course = db_app.state.course
    with TestClient(db_app) as stranger:  # another visitor's rows stay theirs
        _do_things(arm_csrf(stranger), course, "gpu-memory")
        stranger_visitor = stranger.cookies["treino_visitor"]
    _do_things(db_client, course)
    sign_up(db_client, "ana@example.com")
    user_id = _rows(db_app, User)[0].id
    for model in (QuizAttempt, CardReached):
        owners = {(row.visitor_id == stranger_visitor, row.user_id) for row in _rows(db_app, model)}
        assert owners == {(True, None), (False, user_id)}, model
    progress = db_client.get("/api/progress").json()
    bottleneck = next(p for p in progress["lessons"] if p["lesson"] == "bottleneck")
    assert (bottleneck["cards_read"], bottleneck["quiz_questions_right"]) == (1, 1)


def test_sign_in_on_another_device_adopts_that_devices_work(db_client, db_app):
    course = db_app.state.course
    sign_up(db_client, "ana@example.com")
    with TestClient(db_app) as phone:
        arm_csrf(phone)
        _do_things(phone, course, "gpu-memory")
        sign_in(phone, "ana@example.com")
    lessons = {p["lesson"]: p for p in db_client.get("/api/progress").json()["lessons"]}
    assert lessons["gpu-memory"]["cards_read"] == 1


def test_owned_by_separates_accounts_visitors_and_adopted_rows(db_app):
    with db_app.state.sessionmaker() as db, db.begin():
        ana = User(email="ana@example.com", password_hash="x")
        bea = User(email="bea@example.com", password_hash="x")
        db.add_all([ana, bea])
        db.flush()
        for owner in ({"user_id": ana.id, "visitor_id": "v1"}, {"user_id": None, "visitor_id": "v1"},
                      {"user_id": None, "visitor_id": "v2"}, {"user_id": bea.id, "visitor_id": "v2"}):
            db.add(CardReached(**owner, lesson="bottleneck", card=0))
    with db_app.state.sessionmaker() as db:
        def mine(learner):
            return sorted((r.user_id, r.visitor_id) for r in db.scalars(
                select(CardReached).where(owned_by(CardReached, learner))))
        assert mine(Learner("v1", ana)) == [(ana.id, "v1")]
        assert mine(Learner("v1")) == [(None, "v1")], "the account's rows stay hidden after sign-out"
        assert mine(Learner("v2")) == [(None, "v2")]
        assert mine(Learner("v9", bea)) == [(bea.id, "v2")]
        adopt(db, bea, "v1")
        db.commit()
        assert mine(Learner("v1")) == []
        assert mine(Learner("x", bea)) == [(bea.id, "v1"), (bea.id, "v2")]
        assert mine(Learner("x", ana)) == [(ana.id, "v1")]
