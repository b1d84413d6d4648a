from datetime import datetime

from sqlalchemy import DateTime, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.accounts.models import Owned
from app.db import Base, utcnow


class Draft(Owned, Base):
    """The code a learner is writing for one exercise, saved as they type.

    One row per learner and exercise by upsert (service.save); no unique constraint, because
    adoption at sign-in may briefly give an account two rows: the newest wins (service.get)."""

    __tablename__ = "drafts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    exercise: Mapped[str] = mapped_column(String(120), index=True)
    code: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
