from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.accounts.ownership import Learner, owned_by
from app.lessons.course import Lesson, Option, Question
from app.quizzes.models import QuizAttempt


def record_attempt(
    session: Session,
    learner: Learner,
    lesson: Lesson,
    question: Question,
    option: Option,
    *,
    key: str | None = None,
    client: str | None = None,
) -> QuizAttempt:
    """Store one answer. With an idempotency ``key`` already used by this learner (an answer given
    offline, sent again), nothing new is stored: the first attempt sent with it is returned."""
    if key and (earlier := _with_key(session, learner, key)) is not None:
        return earlier
    if key and session.scalar(select(QuizAttempt.id).where(QuizAttempt.idempotency_key == key)):
        key = None  # someone else's key (they are random: never by chance): an ordinary answer
    attempt = QuizAttempt(
        **learner.owner,
        lesson=lesson.slug,
        question=question.id,
        option=option.id,
        correct=option.correct,
        idempotency_key=key,
        client=client,
    )
    try:
        with session.begin_nested():
            session.add(attempt)
    except IntegrityError:  # the same key, sent twice at once: the other request stored it
        earlier = _with_key(session, learner, key) if key else None
        if earlier is None:
            raise
        return earlier
    return attempt


def _with_key(session: Session, learner: Learner, key: str) -> QuizAttempt | None:
    return session.scalar(
        select(QuizAttempt).where(QuizAttempt.idempotency_key == key, owned_by(QuizAttempt, learner))
    )
