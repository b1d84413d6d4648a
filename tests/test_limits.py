"""Limits that count (issue 43): a burst at once cannot pass a limit on one shared count (real
threads, on SQLite and PostgreSQL: the anonymous queue cap, the sign-in slow-down per
address), and a signed-in learner is limited as themselves, not as the classroom's address."""

import time
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.accounts import service
from app.accounts.models import ThrottleHit
from app.config import Settings
from app.main import create_app
from app.submissions import queue
from app.submissions.models import Submission
from tests.conftest import LESSONS, PASSWORD, arm_csrf, sign_up

SUBMIT = "/api/lessons/gradient-accumulation/exercises/accumulate/submissions"
AT_ONCE = 8


def _at_once(calls) -> list[int]:
    """Run the calls in threads released together; their status codes, in order."""
    start = Barrier(len(calls))

    def go(call):
        start.wait()
        return call().status_code

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(go, calls))


def _slowed(monkeypatch, module, name: str) -> None:
    """`module.name` takes 50 ms longer: a wide window between a limit's count and its insert,
    so that without the lock every request of the burst would read the same count."""
    real = getattr(module, name)

    def slowly(*args, **kwargs):
        time.sleep(0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, slowly)


def _count(app, model, *where) -> int:
    with app.state.sessionmaker() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where)) or 0


def test_a_burst_of_anonymous_submissions_gets_exactly_the_queue_cap(make_db_app, monkeypatch):
    app = make_db_app(queued_per_client=2)
    _slowed(monkeypatch, queue, "enqueue")
    with TestClient(app):  # started once; each visitor a cookie-less client of the same address
        visitors = [TestClient(app) for _ in range(AT_ONCE)]
        codes = _at_once([lambda v=v: v.post(SUBMIT, json={"code": "x = 1"}) for v in visitors])
    assert sorted(codes) == [202] * 2 + [429] * (AT_ONCE - 2), codes
    assert _count(app, Submission) == 2


def test_a_burst_of_wrong_passwords_gets_exactly_the_free_tries_of_the_address(make_db_app, monkeypatch):
    """Past ACCOUNT_FREE_FAILURES failures for one address, each further try waits: a burst of
    guesses at once is counted one after another, so no more than the free ones are checked."""
    app = make_db_app()
    with TestClient(app) as owner:
        arm_csrf(owner)
        sign_up(owner, "ana@example.com")
    _slowed(monkeypatch, service, "verify")
    with TestClient(app):
        guessers = [arm_csrf(TestClient(app)) for _ in range(AT_ONCE)]
        codes = _at_once(
            [
                lambda g=g, n=n: g.post("/sign-in", data={"email": "ana@example.com", "password": f"x{n}"})
                for n, g in enumerate(guessers)
            ]
        )
    free = service.ACCOUNT_FREE_FAILURES
    assert sorted(codes) == [400] * free + [429] * (AT_ONCE - free), codes
    assert _count(app, ThrottleHit, ThrottleHit.key.startswith("signin-email:")) == free


# ---------------------------------------------------------------- per account when signed in


def test_signed_in_learners_behind_one_address_are_limited_as_themselves(sqlite_url, _course):
    """A classroom behind one address: past the address's limit (1 here, as if the class had
    sent 30 already), each signed-in learner still sends up to their own limit (2), and no more;
    anonymous visitors from there share the address's."""
    settings = Settings(
        database_url=sqlite_url,
        lessons_dir=LESSONS,
        submissions_per_ip=1,
        submissions_per_account=2,
        _env_file=None,
    )
    app = create_app(settings, course=_course)

    def cancel_all() -> None:  # each learner has one submission waiting at most: grade it away
        with app.state.sessionmaker.begin() as session:
            for sub in session.scalars(select(Submission).where(Submission.active_owner.is_not(None))):
                queue.cancel(session, sub)

    with TestClient(app) as anonymous, TestClient(app) as ana, TestClient(app) as bruno:
        assert anonymous.post(SUBMIT, json={"code": "x = 1"}).status_code == 202
        cancel_all()
        assert TestClient(app).post(SUBMIT, json={"code": "x = 1"}).status_code == 429, "the address's"
        for learner, email in ((ana, "ana@example.com"), (bruno, "bruno@example.com")):
            arm_csrf(learner)
            sign_up(learner, email, PASSWORD)
            for _ in range(settings.submissions_per_account):
                assert learner.post(SUBMIT, json={"code": "x = 1"}).status_code == 202
                cancel_all()
            refused = learner.post(SUBMIT, json={"code": "x = 1"})
            assert refused.status_code == 429 and refused.json()["code"] == "throttled", "their own"
    for factory in (app.state.sessionmaker, app.state.reader):
        factory.kw["bind"].dispose()
