from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, DateTime, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.accounts.models import Owned
from app.db import Base, utcnow


class Status(StrEnum):
    """A submission's life: queued → running → one final status. The row is the job."""

    QUEUED = "queued"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    CANCELLED = "cancelled"  # the learner stopped waiting; nothing was graded

    @property
    def final(self) -> bool:
        return self not in (Status.QUEUED, Status.RUNNING)


class Mode(StrEnum):
    SUBMIT = "submit"  # graded
    RUN = "run"  # run on the exercise's data, output shown, not graded


class Submission(Owned, Base):
    __tablename__ = "submissions"
    __table_args__ = (
        Index("ix_submissions_status_id", "status", "id"),
        Index("ix_submissions_client_started_at", "client", "started_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    exercise: Mapped[str] = mapped_column(String(120))
    mode: Mapped[str] = mapped_column(String(10), default=Mode.SUBMIT)
    code: Mapped[str] = mapped_column(Text)
    lang: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(10), default=Status.QUEUED)
    verdict: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Fair use: the learner's key while the submission is queued or running, NULL once final;
    # unique, so a second active submission for the same learner cannot be inserted.
    active_owner: Mapped[str | None] = mapped_column(String(80), nullable=True, unique=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(80), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # the client address it came from: the queue serves clients in turn (app/submissions/queue.py), so
    # many cookie-less learners from one address wait behind each other, not before everyone
    client: Mapped[str | None] = mapped_column(String(80), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # the page's Idempotency-Key (app/offline/idempotency.py): code submitted offline and sent
    # again is graded once
    idempotency_key: Mapped[str | None] = mapped_column(String(64), nullable=True, unique=True, index=True)
