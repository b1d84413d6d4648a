from datetime import UTC, datetime

from sqlalchemy import Boolean, DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base


def utcnow() -> datetime:
    return datetime.now(UTC)


class QuizAttempt(Base):
    """One answer to one quick-check question. `visitor_id` is the anonymous visitor's cookie;
    accounts adopt a visitor's attempts when they sign in."""

    __tablename__ = "quiz_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    visitor_id: Mapped[str] = mapped_column(String(64), index=True)
    lesson: Mapped[str] = mapped_column(String(80))
    question: Mapped[str] = mapped_column(String(80))
    option: Mapped[str] = mapped_column(String(80))
    correct: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
