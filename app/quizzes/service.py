from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounts.service import Learner, owned_by
from app.lessons.content import Lesson, Option, Question
from app.quizzes.models import QuizAttempt


def record_attempt(session: Session, learner: Learner, lesson: Lesson, question: Question,
                   option: Option) -> QuizAttempt:
    attempt = QuizAttempt(**learner.owner, lesson=lesson.slug, question=question.id,
                          option=option.id, correct=option.correct)
    session.add(attempt)
    session.flush()
    return attempt


def latest_answers(session: Session, learner: Learner, lesson: Lesson) -> dict[str, str]:
    """question id → the option this learner chose last (only options that still exist)."""
    rows = session.scalars(
        select(QuizAttempt)
        .where(owned_by(QuizAttempt, learner), QuizAttempt.lesson == lesson.slug)
        .order_by(QuizAttempt.id)
    )
    answers = {}
    for row in rows:
        question = lesson.question(row.question)
        if question and question.option(row.option):
            answers[row.question] = row.option
    return answers
