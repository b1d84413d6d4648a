from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.accounts.service import Learner, owned_by
from app.lessons.content import Exercise
from app.submissions.models import Mode, Status, Submission

NOTIFY_CHANNEL = "treino_jobs"  # worker/queue.py listens on it


class AlreadyActive(Exception):
    """The learner already has a submission queued or running."""


def enqueue(session: Session, learner: Learner, exercise: Exercise, code: str, *, mode: Mode,
            lang: str, request_id: str | None = None) -> Submission:
    """Insert the submission; it is a job as soon as this transaction commits."""
    submission = Submission(
        **learner.owner, exercise=exercise.id, mode=mode, code=code, lang=lang,
        status=Status.QUEUED, active_owner=_active_key(learner), request_id=request_id,
    )
    try:
        with session.begin_nested():
            session.add(submission)
    except IntegrityError:
        raise AlreadyActive from None
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, :id)"),
                        {"channel": NOTIFY_CHANNEL, "id": str(submission.id)})
    return submission


def _active_key(learner: Learner) -> str:
    return f"user:{learner.user.id}" if learner.user else f"visitor:{learner.visitor_id}"


def get_own(session: Session, learner: Learner, submission_id: int) -> Submission | None:
    return session.scalar(select(Submission).where(Submission.id == submission_id,
                                                   owned_by(Submission, learner)))


def history(session: Session, learner: Learner, exercise: Exercise, limit: int = 20) -> list[Submission]:
    """The learner's submissions for one exercise, newest first."""
    return list(session.scalars(
        select(Submission)
        .where(owned_by(Submission, learner), Submission.exercise == exercise.id)
        .order_by(Submission.id.desc()).limit(limit)))


def queue_position(session: Session, submission: Submission) -> int | None:
    """1 for the next job a worker will claim; None unless queued."""
    if submission.status != Status.QUEUED:
        return None
    ahead = session.scalar(select(func.count()).select_from(Submission).where(
        Submission.status == Status.QUEUED, Submission.id < submission.id))
    return (ahead or 0) + 1
