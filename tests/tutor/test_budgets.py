"""The tutor's budgets hold under concurrency: many questions asked at once, past a budget, let
exactly the budget through (on SQLite and on PostgreSQL), for one learner and for many learners
behind one address. The budget's read is slowed down here so that, without the lock, every
asker would read the same count before any question is stored."""

import time
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.main import create_app
from app.tutor import service
from app.tutor.models import TutorMessage
from tests.conftest import arm_csrf, sign_up
from tests.tutor.helpers import ASK, STARTER_LIKE
from tests.tutor.test_cards import LESSON

ASKERS = 8
BUDGET = 3


@pytest.fixture
def slow_reads(monkeypatch):
    spent = service._spent

    def slowly(*args, **kwargs):
        out = spent(*args, **kwargs)
        time.sleep(0.05)  # a wide window between the budget's read and the question's insert
        return out

    monkeypatch.setattr(service, "_spent", slowly)


@pytest.fixture
def tutor_app(database_url, _course):
    from tests.tutor.conftest import tutor_settings

    def make(**budgets):
        # the POST never reaches the model: nothing needs to listen at this URL
        return create_app(tutor_settings(database_url, "http://127.0.0.1:9/v1", **budgets), course=_course)

    apps = []
    yield lambda **budgets: apps.append(make(**budgets)) or apps[-1]
    for app in apps:
        for factory in (app.state.sessionmaker, app.state.reader):
            factory.kw["bind"].dispose()


def _at_once(calls) -> list[int]:
    """Run the calls in threads released together; their status codes."""
    start = Barrier(len(calls))

    def go(call):
        start.wait()
        return call().status_code

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(go, calls))


def _questions(app) -> int:
    with app.state.sessionmaker() as session:
        return session.scalar(
            select(func.count()).select_from(TutorMessage).where(TutorMessage.role == "learner")
        )


def test_one_learner_asking_at_once_gets_exactly_the_budget(tutor_app, slow_reads):
    app = tutor_app(tutor_messages_per_hour=BUDGET)
    with TestClient(app) as client:
        arm_csrf(client)
        calls = [
            (lambda i=i: client.post(ASK, json={"question": f"q{i}", "code": STARTER_LIKE}))
            if i % 2
            else (lambda i=i: client.post(f"{LESSON}/cards/1/tutor", json={"question": f"q{i}"}))
            for i in range(ASKERS)
        ]  # on an exercise and on a card: one budget
        codes = _at_once(calls)
    assert sorted(codes) == [202] * BUDGET + [429] * (ASKERS - BUDGET), codes
    assert _questions(app) == BUDGET


def test_learners_behind_one_address_asking_at_once_get_exactly_its_budget(tutor_app, slow_reads):
    app = tutor_app(tutor_messages_per_ip_hour=BUDGET)
    with TestClient(app):  # the app started once; a classroom: one visitor each, one IP
        clients = [arm_csrf(TestClient(app)) for _ in range(ASKERS)]
        codes = _at_once(
            [lambda c=c: c.post(ASK, json={"question": "q", "code": STARTER_LIKE}) for c in clients]
        )
    assert sorted(codes) == [202] * BUDGET + [429] * (ASKERS - BUDGET), codes
    assert _questions(app) == BUDGET


def test_signed_in_learners_behind_one_address_have_budgets_of_their_own(tutor_app):
    """The address's budget is anonymous visitors' (each a fresh cookie away from a new one); a
    classroom of signed-in learners behind it asks under each learner's own."""
    app = tutor_app(tutor_messages_per_ip_hour=1, tutor_messages_per_hour=1)
    with TestClient(app):
        anonymous = arm_csrf(TestClient(app))
        assert anonymous.post(ASK, json={"question": "q", "code": STARTER_LIKE}).status_code == 202
        assert arm_csrf(TestClient(app)).post(ASK, json={"question": "q"}).status_code == 429
        for n in range(2):
            learner = arm_csrf(TestClient(app))
            sign_up(learner, f"learner{n}@class.example")
            assert learner.post(ASK, json={"question": "q", "code": STARTER_LIKE}).status_code == 202
            assert learner.post(ASK, json={"question": "again"}).status_code == 429, "their own budget"
