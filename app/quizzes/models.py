from datetime import datetime

from sqlalchemy import Boolean, DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.accounts.models import Owned
from app.db import Base, utcnow


class QuizAttempt(Owned, Base):
    """One answer to one quick-check question, owned by a visitor or an account (see Owned)."""

    __tablename__ = "quiz_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lesson: Mapped[str] = mapped_column(String(80))
    question: Mapped[str] = mapped_column(String(80))
    option: Mapped[str] = mapped_column(String(80))
    correct: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # the address it came from: what an anonymous client's answers are counted by (its quota,
    # app/progress/service.within_quota)
    client: Mapped[str | None] = mapped_column(String(80), nullable=True, index=True)
    # the page's Idempotency-Key (app/offline/idempotency.py): an answer given offline and sent
    # again is stored once
    idempotency_key: Mapped[str | None] = mapped_column(String(64), nullable=True, unique=True, index=True)
