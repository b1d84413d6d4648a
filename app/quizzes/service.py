from sqlalchemy import select
from sqlalchemy.orm import Session

from app.lessons.content import Lesson, Option, Question
from app.quizzes.models import QuizAttempt


def record_attempt(session: Session, visitor_id: str, lesson: Lesson, question: Question,
                   option: Option) -> QuizAttempt:
    attempt = QuizAttempt(visitor_id=visitor_id, lesson=lesson.slug, question=question.id,
                          option=option.id, correct=option.correct)
    session.add(attempt)
    session.flush()
    return attempt


def latest_answers(session: Session, visitor_id: str, lesson: Lesson) -> dict[str, str]:
    """question id → the option this visitor chose last (only options that still exist)."""
    rows = session.scalars(
        select(QuizAttempt)
        .where(QuizAttempt.visitor_id == visitor_id, QuizAttempt.lesson == lesson.slug)
        .order_by(QuizAttempt.id)
    )
    answers = {}
    for row in rows:
        question = lesson.question(row.question)
        if question and question.option(row.option):
            answers[row.question] = row.option
    return answers
