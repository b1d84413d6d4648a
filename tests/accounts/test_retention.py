"""Anonymous data is pruned after TREINO_ANONYMOUS_DAYS without use (issue 43, free storage): every
row of a visitor without an account who wrote nothing since goes, in every owned table; a visitor
who used anything since keeps it all; accounts' rows stay, however old."""

from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.accounts import retention
from app.accounts.models import ThrottleHit, User
from app.accounts.ownership import owned_tables
from app.config import Settings
from app.db import make_engine, utcnow
from app.drafts.models import Draft
from app.progress.models import CardReached
from app.quizzes.models import QuizAttempt
from app.submissions.models import Submission
from app.tutor.models import TutorMessage
from tests.conftest import LESSONS
from worker.runner import Worker

DAYS = 30
LONG_AGO = timedelta(days=DAYS + 1)
LATELY = timedelta(days=DAYS - 1)


def _rows(owner: dict, at: datetime) -> list:
    """One row in each table of a learner's own rows, last written `at`."""
    return [
        Draft(**owner, exercise="gradient-accumulation/accumulate", code="x = 1", updated_at=at),
        QuizAttempt(
            **owner, lesson="mixed-precision", question="q1", option="a", correct=True, created_at=at
        ),
        CardReached(**owner, lesson="mixed-precision", card=0, reached_at=at),
        Submission(
            **owner,
            exercise="gradient-accumulation/accumulate",
            code="x = 1",
            lang="en",
            status="passed",
            created_at=at,
            started_at=at,
            finished_at=at,
        ),
        TutorMessage(**owner, exercise="gradient-accumulation/accumulate", role="learner", created_at=at),
    ]


@pytest.fixture
def sessions(database_url):
    engine = make_engine(database_url)
    yield sessionmaker(engine, expire_on_commit=False)
    engine.dispose()


def _fill(sessions: sessionmaker[Session]) -> int:
    """Visitors and an account, old and recent: the account's id."""
    now = utcnow()
    with sessions.begin() as session:
        ana = User(email="ana@example.com", password_hash="x")
        session.add(ana)
        session.flush()
        session.add_all(_rows({"user_id": None, "visitor_id": "gone"}, now - LONG_AGO))
        session.add_all(_rows({"user_id": None, "visitor_id": "gone-too"}, now - LONG_AGO))
        session.add_all(_rows({"user_id": None, "visitor_id": "back"}, now - LONG_AGO))
        session.add(
            CardReached(user_id=None, visitor_id="back", lesson="bottleneck", card=2, reached_at=now - LATELY)
        )
        session.add_all(_rows({"user_id": None, "visitor_id": "recent"}, now - LATELY))
        session.add_all(_rows({"user_id": ana.id, "visitor_id": "gone"}, now - LONG_AGO))  # adopted rows
        session.add(ThrottleHit(key="submit-ip:a", created_at=now - LONG_AGO))
        session.add(ThrottleHit(key="submit-ip:b", created_at=now - timedelta(minutes=5)))
        return ana.id


def _owners(sessions: sessionmaker[Session]) -> dict[str, set]:
    """Per owned table, who owns its rows (a visitor's id, or the account's)."""
    with sessions() as session:
        return {
            table.name: {
                user or visitor
                for user, visitor in session.execute(select(table.c.user_id, table.c.visitor_id))
            }
            for table in owned_tables()
        }


def test_every_owned_table_is_in_this_test():
    """A new table of learners' rows is pruned by its time columns without being named: add it to
    _rows, so that this test shows it."""
    assert {table.name for table in owned_tables()} == {
        row.__tablename__ for row in _rows({"user_id": None, "visitor_id": "v"}, utcnow())
    }


def test_a_visitor_unused_for_the_days_loses_everything_others_keep_theirs(sessions):
    ana = _fill(sessions)
    before = utcnow() - timedelta(days=DAYS)
    went = []
    while True:  # a visitor per transaction here: the batches add up
        with sessions.begin() as session:
            if not (gone := retention.prune(session, before, batch=1)):
                break
            went.append(gone)
    assert went == [1, 1]
    assert _owners(sessions) == {table.name: {"back", "recent", ana} for table in owned_tables()}
    with sessions() as session:
        assert session.scalars(select(ThrottleHit.key)).all() == ["submit-ip:b"]


def test_the_worker_prunes_at_its_start(database_url, sessions):
    """What a deployment runs: each worker, at its start and then every hour (worker/runner.py)."""
    ana = _fill(sessions)
    settings = Settings(database_url=database_url, lessons_dir=LESSONS, anonymous_days=DAYS, _env_file=None)
    with Worker(settings, grade=lambda *args, **kwargs: {}) as worker:

        def no_job() -> bool:  # the loop's first turn: it has pruned by now; then it ends
            worker.stop()
            return False

        worker.run_once = no_job  # type: ignore[method-assign]
        worker.run()
    assert _owners(sessions) == {table.name: {"back", "recent", ana} for table in owned_tables()}
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(ThrottleHit)) == 1
