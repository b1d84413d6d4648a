from datetime import datetime

from sqlalchemy import DateTime, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.accounts.models import Owned
from app.db import Base, utcnow


class TutorMessage(Owned, Base):
    """One turn of a learner's conversation with the AI tutor about one exercise (`exercise`, its
    id) or one lesson card (`card`, "<lesson slug>/<the English heading's anchor>"; `exercise` is
    then empty): the learner's question (`role` "learner") or the tutor's answer (`role` "tutor").

    An answer is made `pending` with the exact messages to send (`prompt`, JSON) when the question
    is asked; the page then streams it (/live/tutor/<id>), and it ends `answered`, `withheld` (it
    reproduced the reference solution: a hint instead), `failed` (the endpoint was down, slow or
    refused; `content` says so) or `cancelled` (the learner stopped it, or went; what came is
    kept). The prompt is dropped once answered. Tokens and latency feed the budgets and /metrics.

    A pending or running answer holds `reserved_tokens`: its whole possible cost (the prompt's
    tokens and the longest answer), counted against the budgets until it ends; then the tokens
    it really used (`prompt_tokens`, `completion_tokens`) replace it (service.py)."""

    __tablename__ = "tutor_messages"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    exercise: Mapped[str | None] = mapped_column(String(120), index=True, nullable=True)
    card: Mapped[str | None] = mapped_column(String(200), index=True, nullable=True)
    role: Mapped[str] = mapped_column(String(10))  # learner | tutor
    status: Mapped[str] = mapped_column(String(12), default="answered")
    content: Mapped[str] = mapped_column(Text, default="")
    lang: Mapped[str] = mapped_column(String(8), default="en")
    prompt: Mapped[str | None] = mapped_column(Text, nullable=True)
    client: Mapped[str] = mapped_column(String(64), default="", index=True)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    reserved_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    first_token_ms: Mapped[int | None] = mapped_column(Integer, nullable=True)
    duration_ms: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
