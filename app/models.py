"""Every table, imported in one place so migrations and tests see the whole schema."""

from app.quizzes.models import QuizAttempt

__all__ = ["QuizAttempt"]
