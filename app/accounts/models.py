"""Accounts, their server-side sessions, sign-in throttling, and what it means to own a row."""

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, utcnow


class Owned:
    """Mixin for every table of a learner's own rows (quiz attempts, progress, submissions…).

    `visitor_id` is the browser's anonymous id (always set); `user_id` is the account, set when
    the row was made signed in or adopted at sign-up/sign-in (accounts.ownership.adopt). Read these
    rows only through accounts.ownership.owned_by. A unique constraint that includes the owner
    columns would make adoption fail on a clash, so owned tables do not have one.
    """

    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), nullable=True, index=True
    )
    visitor_id: Mapped[str] = mapped_column(String(64), index=True)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)  # stored lower-cased
    password_hash: Mapped[str] = mapped_column(String(255))
    lang: Mapped[str | None] = mapped_column(String(8), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AuthSession(Base):
    """A signed-in browser (`kind` "browser", the cookie) or an API token (`kind` "api").

    Only the SHA-256 of the random token is stored, so a database leak signs nobody in.
    """

    __tablename__ = "user_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(10))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ThrottleHit(Base):
    """One counted event (a failed sign-in, a sign-up) under a key such as `signin-ip:1.2.3.4`.

    In the database rather than in memory so that limits hold across web processes.
    """

    __tablename__ = "throttle_hits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(120), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
