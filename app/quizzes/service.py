from sqlalchemy.orm import Session

from app.accounts.ownership import Learner
from app.lessons.content import Lesson, Option, Question
from app.quizzes.models import QuizAttempt


def record_attempt(
    session: Session, learner: Learner, lesson: Lesson, question: Question, option: Option
) -> QuizAttempt:
    attempt = QuizAttempt(
        **learner.owner, lesson=lesson.slug, question=question.id, option=option.id, correct=option.correct
    )
    session.add(attempt)
    session.flush()
    return attempt
