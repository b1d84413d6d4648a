from datetime import datetime

from sqlalchemy import DateTime, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.accounts.models import Owned
from app.db import Base, utcnow


class Draft(Owned, Base):
    """The code a learner is writing for one exercise, saved as they type.

    One row per learner and exercise by upsert (service.save); no unique constraint, because
    adoption at sign-in may briefly give an account two rows: the newest wins (service.get).
    `client` (the address that last saved it) and `size` (the code's UTF-8 bytes) are what the
    anonymous drafts of one client are counted by (service.save_within_quota)."""

    __tablename__ = "drafts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    exercise: Mapped[str] = mapped_column(String(120), index=True)
    code: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    client: Mapped[str | None] = mapped_column(String(80), nullable=True, index=True)
    size: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
