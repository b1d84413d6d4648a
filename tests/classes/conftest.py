"""What the classes' tests share: a session over a migrated database, and learners' recorded work
made straight in it (as the grader and the quick checks would have stored it)."""

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.accounts.models import User
from app.db import make_engine
from app.quizzes.models import QuizAttempt
from app.submissions.models import Mode, Status, Submission
from contracts.verdict import record

EXERCISE = "gradient-accumulation/accumulate"
MISTAKE = "loss-not-scaled"


@pytest.fixture
def session(database_url: str) -> Iterator[Session]:
    engine = make_engine(database_url)
    with sessionmaker(engine, expire_on_commit=False).begin() as s:
        yield s
    engine.dispose()


def account(session: Session, email: str) -> User:
    user = User(email=email, password_hash="!", lang="en")
    session.add(user)
    session.flush()
    return user


def graded(
    session: Session,
    user: User,
    status: Status,
    mistake: str | None = None,
    *,
    exercise: str = EXERCISE,
    mode: Mode = Mode.SUBMIT,
    lang: str = "en",
) -> Submission:
    """A final submission with the verdict record the worker would have written."""
    diagnosis: tuple[str, dict[str, Any]] | None = (mistake, {"ratio": 4.0}) if mistake else None
    verdict_status = status if status in ("passed", "failed", "error", "timeout", "rejected") else "failed"
    submission = Submission(
        user_id=user.id,
        visitor_id=f"v{user.id}",
        exercise=exercise,
        mode=mode,
        code=f"# {user.email}: {status} {mistake}\n",
        lang=lang,
        status=status,
        verdict=None
        if status in (Status.QUEUED, Status.RUNNING)
        else record(exercise, verdict_status, diagnosis=diagnosis),
    )
    session.add(submission)
    session.flush()
    return submission


def answered(session: Session, user: User, lesson: str, question: str, option: str, correct: bool) -> None:
    session.add(
        QuizAttempt(
            user_id=user.id,
            visitor_id=f"v{user.id}",
            lesson=lesson,
            question=question,
            option=option,
            correct=correct,
        )
    )
    session.flush()


def token(app, email: str) -> dict[str, str]:
    """The Authorization header of a new account's API token, made straight in the database."""
    from app.accounts import sessions

    with app.state.sessionmaker.begin() as s:
        user = s.query(User).filter_by(email=email).one_or_none() or account(s, email)
        return {
            "Authorization": f"Bearer {sessions.start_session(s, user, kind='api', visitor_id=f'v-{email}')}"
        }
