"""Accounts: passwords, sessions and API tokens, sign-in throttling, and who the learner is.

Every learner is a visitor (the anonymous `treino_visitor` cookie) and, once signed in, a user.
Rows a learner owns (Owned) are read through owned_by() only, and adopt() hands a visitor's
anonymous rows to the account at sign-up and sign-in, so nothing done before is lost.
"""

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from math import ceil
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, HTTPException, Request
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy import ColumnElement, and_, bindparam, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

import app.models  # noqa: F401  (adopt() must see every owned table)
from app.accounts.models import AuthSession, Owned, ThrottleHit, User
from app.db import Base, aware, utcnow
from app.errors import Redirect
from app.i18n import gettext as _
from app.i18n import ngettext
from app.web import sign_in_url

PASSWORD_MIN = 8
PASSWORD_MAX = 1024  # argon2 takes any length; a bound keeps one request from costing much
EMAIL_MAX = 254
SESSION_IDLE = timedelta(days=30)
SESSION_LIFETIME = timedelta(days=90)
TOUCH_EVERY = timedelta(minutes=5)  # last_seen_at is written at most this often
SIGN_IN_WINDOW = timedelta(minutes=15)
# Failures count per (address, client IP) and per client IP, never per address alone: then
# nobody elsewhere can lock the owner out of an account by failing to sign in to it.
SIGN_IN_FAILURES_PER_EMAIL = 10  # from one client IP
SIGN_IN_FAILURES_PER_IP = 50  # higher: a classroom shares one address
SIGN_UP_WINDOW = timedelta(hours=1)
SIGN_UPS_PER_IP = 20

# argon2id at ASVS 5.0 appendix C's t=2, m=19 MiB, p=1: ~70 ms on a small host. Hashes made
# with other parameters are upgraded at the next sign-in.
_hasher = PasswordHash((Argon2Hasher(time_cost=2, memory_cost=19 * 1024, parallelism=1),))
_EMAIL = re.compile(r"^[^@\s]+@[^@\s.]+(\.[^@\s.]+)+$")


class AccountError(Exception):
    """A refusal the learner can act on: str() is the message in their language; `field` names
    the form field it is about, if one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class EmailTaken(AccountError):
    """Sign-up with an address that already has an account."""


class Throttled(Exception):
    """Too many attempts: the message says when to retry; `retry_after` is in seconds."""

    def __init__(self, retry_after: int) -> None:
        minutes = max(1, ceil(retry_after / 60))
        super().__init__(ngettext("Too many attempts. Try again in %(num)d minute.",
                                  "Too many attempts. Try again in %(num)d minutes.", minutes)
                         % {"num": minutes})
        self.retry_after = retry_after


# ---------------------------------------------------------------- who is asking

@dataclass(frozen=True)
class Auth:
    """What the request's credentials came to; set on request.state by the middleware."""

    user: User | None = None
    session_id: int | None = None
    via: Literal["cookie", "bearer"] | None = None
    expired: bool = False  # a session or token was sent that is no longer valid


@dataclass(frozen=True)
class Learner:
    """The current learner: always a visitor, and a user when signed in."""

    visitor_id: str
    user: User | None = None

    @property
    def owner(self) -> dict[str, Any]:
        """The owner columns for a new Owned row."""
        return {"user_id": self.user.id if self.user else None, "visitor_id": self.visitor_id}


async def get_learner(request: Request) -> Learner:
    return Learner(request.state.visitor_id, request.state.auth.user)


async def require_user(request: Request) -> User:
    """The signed-in user; pages without one go to the sign-in page and come back after."""
    if user := request.state.auth.user:
        return user
    if request.url.path.startswith("/api/"):
        raise HTTPException(401, _("Sign in first: send the header Authorization: Bearer <token>."),
                            headers={"WWW-Authenticate": "Bearer"})
    raise Redirect(sign_in_url(request))


LearnerDep = Annotated[Learner, Depends(get_learner)]
UserDep = Annotated[User, Depends(require_user)]


def owned_by(model: type[Owned], learner: Learner) -> ColumnElement[bool]:
    """The filter for `model`'s rows that belong to `learner`: every query of owned rows uses it.
    Signed in, the account's rows; anonymous, the visitor's rows that no account has taken."""
    return _owner_filter(model, learner.user.id if learner.user else None, learner.visitor_id)


@cache
def owner_clause(model: type[Owned], signed_in: bool) -> ColumnElement[bool]:
    """owned_by with the learner left as bind parameters, for a statement built once and run
    on every page (give it ``owner_params(learner)``)."""
    user_id = bindparam("owner_user_id") if signed_in else None
    return _owner_filter(model, user_id, bindparam("owner_visitor_id"))


def _owner_filter(model: type[Owned], user_id: Any, visitor_id: Any) -> ColumnElement[bool]:
    if user_id is not None:
        return model.user_id == user_id
    return and_(model.visitor_id == visitor_id, model.user_id.is_(None))


def owner_params(learner: Learner) -> dict[str, Any]:
    if learner.user is not None:
        return {"owner_user_id": learner.user.id}
    return {"owner_visitor_id": learner.visitor_id}


def adopt(session: Session, user: User, visitor_id: str) -> None:
    """Give `user` every anonymous row of `visitor_id`, in every Owned table."""
    tables = {m.local_table for m in Base.registry.mappers if issubclass(m.class_, Owned)}
    for table in sorted(tables, key=lambda t: t.name):
        session.execute(update(table)
                        .where(table.c.visitor_id == visitor_id, table.c.user_id.is_(None))
                        .values(user_id=user.id))


# ---------------------------------------------------------------- passwords and accounts

def normalize_email(email: str) -> str:
    return email.strip().lower()


@cache
def common_passwords() -> frozenset[str]:
    lines = (Path(__file__).parent / "common-passwords.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def check_new_password(password: str, email: str) -> None:
    if not password.strip():
        raise AccountError(_("A password cannot be only spaces."), "password")
    if len(password) < PASSWORD_MIN:
        raise AccountError(ngettext("Use at least %(num)d character.", "Use at least %(num)d characters.",
                                    PASSWORD_MIN) % {"num": PASSWORD_MIN}, "password")
    if len(password) > PASSWORD_MAX:
        raise AccountError(ngettext("Use at most %(num)d character.", "Use at most %(num)d characters.",
                                    PASSWORD_MAX) % {"num": PASSWORD_MAX}, "password")
    lowered = password.lower()
    if lowered in common_passwords() or lowered == email or lowered == email.split("@")[0]:
        raise AccountError(_("This password is too common or too easy to guess. A few unrelated "
                             "words make a strong one that is easy to remember."), "password")


def create_account(session: Session, email: str, password: str, *, lang: str, visitor_id: str,
                   ip: str) -> User:
    """A new account that owns what the visitor did so far."""
    email = normalize_email(email)
    if len(email) > EMAIL_MAX or not _EMAIL.match(email):
        raise AccountError(_("Enter a valid e-mail address, like name@example.com."), "email")
    check_new_password(password, email)
    key = f"signup-ip:{ip}"
    if wait := _retry_after(session, key, SIGN_UPS_PER_IP, SIGN_UP_WINDOW):
        raise Throttled(wait)
    taken = EmailTaken(_("This e-mail address cannot be used for a new account. If it is yours, "
                           "sign in instead."), "email")
    if session.scalar(select(User.id).where(User.email == email)) is not None:
        raise taken
    user = User(email=email, password_hash=_hasher.hash(password), lang=lang)
    try:
        with session.begin_nested():
            session.add(user)
    except IntegrityError:  # the same address signed up at the same moment
        raise taken from None
    _hit(session, key, SIGN_UP_WINDOW)
    adopt(session, user, visitor_id)
    return user


@cache
def _dummy_hash() -> str:
    return _hasher.hash(secrets.token_urlsafe(16))


def check_password(session: Session, email: str, password: str, *, ip: str) -> User:
    """The account for these credentials. The refusal is the same whether or not the address is
    registered, and takes as long; failures are counted per (address, client address) and per
    client address."""
    email = normalize_email(email)[:EMAIL_MAX]
    keys = [(_email_key(email, ip), SIGN_IN_FAILURES_PER_EMAIL),
            (f"signin-ip:{ip}", SIGN_IN_FAILURES_PER_IP)]
    waits = [_retry_after(session, key, limit, SIGN_IN_WINDOW) for key, limit in keys]
    if any(waits):
        raise Throttled(max(w for w in waits if w))
    user = session.scalar(select(User).where(User.email == email))
    password = password[:PASSWORD_MAX + 1]
    if user is None:
        _hasher.verify(password, _dummy_hash())
        valid, new_hash = False, None
    else:
        valid, new_hash = _hasher.verify_and_update(password, user.password_hash)
    if not valid:
        for key, _limit in keys:
            _hit(session, key, SIGN_IN_WINDOW)
        session.commit()  # counted even though the request then fails
        raise AccountError(_("Wrong e-mail or password."))
    assert user is not None
    if new_hash:
        user.password_hash = new_hash
    session.execute(delete(ThrottleHit).where(ThrottleHit.key == keys[0][0]))
    return user


def change_password(session: Session, user: User, current: str, new: str, *, keep_session: int | None,
                    ip: str) -> None:
    """Set a new password (the current one proves it is the owner) and end every other session
    and API token of the account."""
    try:
        check_password(session, user.email, current, ip=ip)
    except AccountError:
        raise AccountError(_("The current password is not right."), "current_password") from None
    try:
        check_new_password(new, user.email)
    except AccountError as e:
        raise AccountError(str(e), "new_password") from None
    stored = session.get_one(User, user.id)
    stored.password_hash = _hasher.hash(new)
    session.execute(delete(AuthSession).where(AuthSession.user_id == user.id,
                                              AuthSession.id != (keep_session or -1)))


def set_lang(session: Session, user: User, lang: str) -> None:
    session.get_one(User, user.id).lang = lang


# ---------------------------------------------------------------- sessions and tokens

def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def start_session(session: Session, user: User, *, kind: Literal["browser", "api"],
                  visitor_id: str) -> str:
    """Sign `user` in: adopt the visitor's rows, store a new session, return its token (shown
    once: only its hash is kept)."""
    adopt(session, user, visitor_id)
    token = secrets.token_urlsafe(32)
    now = utcnow()
    session.add(AuthSession(user_id=user.id, token_hash=_digest(token), kind=kind, created_at=now,
                            last_seen_at=now, expires_at=now + SESSION_LIFETIME))
    return token


def end_session(session: Session, session_id: int | None) -> None:
    if session_id is not None:
        session.execute(delete(AuthSession).where(AuthSession.id == session_id))


def authenticate(factory: sessionmaker[Session], token: str, via: Literal["cookie", "bearer"],
                 asked_lang: str | None) -> Auth:
    """The account behind a session cookie or bearer token. A language the visitor picks while
    signed in (`?lang=`) is kept on the account."""
    kind = "browser" if via == "cookie" else "api"
    with factory.begin() as session:
        row = session.execute(
            select(AuthSession, User).join(User, AuthSession.user_id == User.id)
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
        return Auth(user=user, session_id=stored.id, via=via)


# ---------------------------------------------------------------- throttling

def _email_key(email: str, ip: str) -> str:
    digest = hashlib.sha256(f"{email}\n{ip}".encode()).hexdigest()[:40]  # no address at rest
    return f"signin-email-ip:{digest}"


def spend(session: Session, key: str, limit: int, window: timedelta) -> None:
    """Count one use of `key`; Throttled once it was used `limit` times within `window`."""
    if wait := _retry_after(session, key, limit, window):
        raise Throttled(wait)
    _hit(session, key, window)


def _retry_after(session: Session, key: str, limit: int, window: timedelta) -> int | None:
    """Seconds until `key` may be used again, or None when it is under its limit."""
    now = utcnow()
    times = session.scalars(select(ThrottleHit.created_at)
                            .where(ThrottleHit.key == key, ThrottleHit.created_at > now - window)
                            .order_by(ThrottleHit.created_at)).all()
    if len(times) < limit:
        return None
    return max(1, ceil((aware(times[-limit]) + window - now).total_seconds()))


def _hit(session: Session, key: str, window: timedelta) -> None:
    now = utcnow()
    session.execute(delete(ThrottleHit).where(ThrottleHit.key == key,
                                              ThrottleHit.created_at <= now - window))
    session.add(ThrottleHit(key=key, created_at=now))
