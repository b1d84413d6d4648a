from datetime import datetime

from sqlalchemy import DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.accounts.models import Owned
from app.db import Base, utcnow


class CardReached(Owned, Base):
    """A lesson card the learner scrolled to. `card` is the card's index, the same in every
    language (anchors differ); `reached_at` is refreshed on each visit."""

    __tablename__ = "cards_reached"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lesson: Mapped[str] = mapped_column(String(80))
    card: Mapped[int] = mapped_column(Integer)
    reached_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # the address it came from: what an anonymous client's rows are counted by (service.within_quota)
    client: Mapped[str | None] = mapped_column(String(80), nullable=True, index=True)
