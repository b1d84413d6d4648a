"""Sessions and API tokens: a signed-in browser (the session cookie) or an API client (a bearer
token) is an AuthSession row; only the SHA-256 of its random token is stored, so a database
leak signs nobody in. The cookie itself is set in app/accounts/auth.py."""

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.accounts.models import AuthSession, User
from app.accounts.ownership import adopt
from app.db import aware, utcnow

SESSION_IDLE = timedelta(days=30)
SESSION_LIFETIME = timedelta(days=90)
TOUCH_EVERY = timedelta(minutes=5)  # last_seen_at is written at most this often

Via = Literal["cookie", "bearer"]


@dataclass(frozen=True)
class Auth:
    """What the request's credentials came to; request.state.auth (set by the middleware)."""

    user: User | None = None
    session_id: int | None = None
    via: Via | None = None
    expired: bool = False  # a session or token was sent that is no longer valid
    account_deleted: bool = False  # expired because this browser's account was deleted
    token: str | None = field(default=None, repr=False)  # the credential sent, when valid

    @property
    def lang(self) -> str | None:
        """The signed-in account's language."""
        return self.user.lang if self.user else None

    @property
    def csrf_identity(self) -> str | None:
        """What the CSRF token is bound to: the browser session, while one signs the request in
        (else the middleware binds it to the visitor)."""
        return f"session:{self.token}" if self.via == "cookie" and self.token else None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def start_session(session: Session, user: User, *, kind: Literal["browser", "api"], visitor_id: str) -> str:
    """Sign `user` in: adopt the visitor's rows, store a new session, return its token (shown
    once: only its hash is kept)."""
    adopt(session, user, visitor_id)
    token = secrets.token_urlsafe(32)
    now = utcnow()
    session.add(
        AuthSession(
            user_id=user.id,
            token_hash=_digest(token),
            kind=kind,
            created_at=now,
            last_seen_at=now,
            expires_at=now + SESSION_LIFETIME,
        )
    )
    return token


def end_session(session: Session, session_id: int | None) -> None:
    if session_id is not None:
        session.execute(delete(AuthSession).where(AuthSession.id == session_id))


def end_sessions(session: Session, user: User, *, keep: int | None = None) -> None:
    """Sign `user` out everywhere (every browser and API token), except the session `keep`."""
    session.execute(delete(AuthSession).where(AuthSession.user_id == user.id, AuthSession.id != (keep or -1)))


def authenticate(session: Session, token: str, via: Via, asked_lang: str | None) -> Auth:
    """The account behind a session cookie or bearer token. A language the visitor picks while
    signed in (`?lang=`) is kept on the account."""
    kind = "browser" if via == "cookie" else "api"
    row = session.execute(
        select(AuthSession, User)
        .join(User, AuthSession.user_id == User.id)
        .where(AuthSession.token_hash == _digest(token), AuthSession.kind == kind)
    ).first()
    if row is None:
        return Auth(via=via, expired=True)
    stored, user = row
    now = utcnow()
    if now >= aware(stored.expires_at) or now >= aware(stored.last_seen_at) + SESSION_IDLE:
        session.delete(stored)
        return Auth(via=via, expired=True)
    if now - aware(stored.last_seen_at) > TOUCH_EVERY:
        stored.last_seen_at = now
    if asked_lang and asked_lang != user.lang:
        user.lang = asked_lang
    return Auth(user=user, session_id=stored.id, via=via, token=token)
