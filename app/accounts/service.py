"""Accounts: signing up, checking a password (throttled), changing it.

The pieces live beside this module: passwords.py (the rules, hashing, AccountError),
ownership.py (Learner, owned_by, adopt), sessions.py (sessions and API tokens), throttling.py;
lifecycle.py resets, exports and deletes an account; auth.py is the HTTP side (dependencies,
cookies, the middleware's hook). Nothing here commits: the request's transaction does.
"""

import hashlib
import re
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.accounts import throttling
from app.accounts.models import User
from app.accounts.ownership import adopt
from app.accounts.passwords import (
    EMAIL_MAX,
    AccountError,
    check_new_password,
    hash_password,
    normalize_email,
    verify,
)
from app.accounts.sessions import end_sessions
from app.accounts.throttling import Throttled
from app.db import aware
from app.i18n import gettext as _

SIGN_IN_WINDOW = timedelta(minutes=15)
# Failures count per (address, client IP) and per client IP, with a cap each; and per address
# from everywhere, as a delay that doubles with each failure past a few (never a lockout: the
# owner's own browser, known by the device cookie a sign-in there left, does not wait for it).
SIGN_IN_FAILURES_PER_EMAIL = 10  # from one client IP (or one known device)
SIGN_IN_FAILURES_PER_IP = 50  # higher: a classroom shares one address
ACCOUNT_FREE_FAILURES = 5  # per address from all clients, before each try waits 1, 2, 4… s
ACCOUNT_WINDOW = timedelta(hours=1)
ACCOUNT_LONGEST_WAIT = timedelta(minutes=15)
SIGN_UP_WINDOW = timedelta(hours=1)
SIGN_UPS_PER_IP = 20

_EMAIL = re.compile(r"^[^@\s]+@[^@\s.]+(\.[^@\s.]+)+$")


class EmailTaken(AccountError):
    """Sign-up with an address that already has an account."""


def create_account(
    session: Session, email: str, password: str, *, lang: str, visitor_id: str, ip: str
) -> User:
    """A new account that owns what the visitor did so far."""
    email = normalize_email(email)
    if len(email) > EMAIL_MAX or not _EMAIL.match(email):
        raise AccountError(_("Enter a valid e-mail address, like name@example.com."), "email")
    check_new_password(password, email)
    key = f"signup-ip:{ip}"
    throttling.check(session, key, SIGN_UPS_PER_IP, SIGN_UP_WINDOW)
    taken = EmailTaken(
        _("This e-mail address cannot be used for a new account. If it is yours, sign in instead."), "email"
    )
    if session.scalar(select(User.id).where(User.email == email)) is not None:
        raise taken
    user = User(email=email, password_hash=hash_password(password), lang=lang)
    try:
        with session.begin_nested():
            session.add(user)
    except IntegrityError:  # the same address signed up at the same moment
        raise taken from None
    throttling.hit(session, key, SIGN_UP_WINDOW)
    adopt(session, user, visitor_id)
    return user


def find_user(session: Session, email: str) -> User | None:
    return session.scalar(select(User).where(User.email == normalize_email(email)))


# The device cookie of a browser where an account signed in (app/accounts/auth.py): the
# account's id, when the cookie was issued (epoch seconds), the browser's own random id.
Device = tuple[int, int, str]


def names(device: Device | None, user: User | None) -> bool:
    """Whether `device` was issued to `user`'s account (not to an earlier one with its id)."""
    return (
        device is not None
        and user is not None
        and device[0] == user.id
        and aware(user.created_at).timestamp() <= device[1] + 1
    )


def check_password(
    session: Session, email: str, password: str, *, ip: str, device: Device | None = None
) -> User:
    """The account for these credentials. The refusal is the same whether or not the address is
    registered, and takes as long. Failures are counted per (address, client address), per
    client address, and per address from everywhere (a growing delay, which the account's own
    browser is spared: one with a `device` cookie issued to this account; its failures count
    per device instead). In the session: a caller that answers the refusal with an error (and so
    a rollback) commits first, or the failure is not counted."""
    email = normalize_email(email)[:EMAIL_MAX]
    user = find_user(session, email)
    own = device[2] if device is not None and names(device, user) else None
    return _check(session, email, user, password, ip=ip, own_device=own)


def _check(
    session: Session, email: str, user: User | None, password: str, *, ip: str, own_device: str | None
) -> User:
    keys = [(_email_key(email, ip), SIGN_IN_FAILURES_PER_EMAIL), (f"signin-ip:{ip}", SIGN_IN_FAILURES_PER_IP)]
    if own_device is not None:
        keys.append((f"signin-device:{_digest(own_device)}", SIGN_IN_FAILURES_PER_EMAIL))
    account = f"signin-email:{_digest(email)}"
    waits = [throttling.retry_after(session, key, limit, SIGN_IN_WINDOW) for key, limit in keys]
    if own_device is None:
        waits.append(
            throttling.delay(session, account, ACCOUNT_FREE_FAILURES, ACCOUNT_WINDOW, ACCOUNT_LONGEST_WAIT)
        )
    if any(waits):
        raise Throttled(max(w for w in waits if w))
    valid, new_hash = verify(password, user.password_hash if user else None)
    if user is None or not valid:
        for key, _limit in keys:
            throttling.hit(session, key, SIGN_IN_WINDOW)
        throttling.hit(session, account, ACCOUNT_WINDOW)
        raise AccountError(_("Wrong e-mail or password."))
    if new_hash:
        user.password_hash = new_hash
    throttling.forget(session, keys[0][0])
    return user


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:40]  # no address at rest


def _email_key(email: str, ip: str) -> str:
    return "signin-email-ip:" + _digest(f"{email}\n{ip}")


def confirm_password(
    session: Session, user: User, password: str, *, ip: str, message: str, field: str
) -> None:
    """AccountError(`message`, `field`) unless `password` is `user`'s (throttled as a sign-in):
    what changing the password or deleting the account asks first."""
    try:  # signed in, this browser is the owner's: no wait for others' failures
        _check(session, user.email, user, password, ip=ip, own_device=f"session-of-{user.id}")
    except AccountError:
        raise AccountError(message, field) from None


def change_password(
    session: Session, user: User, current: str, new: str, *, keep_session: int | None, ip: str
) -> None:
    """Set a new password (the current one proves it is the owner) and end every other session
    and API token of the account."""
    confirm_password(
        session,
        user,
        current,
        ip=ip,
        message=_("The current password is not right."),
        field="current_password",
    )
    check_new_password(new, user.email, "new_password")
    session.get_one(User, user.id).password_hash = hash_password(new)
    end_sessions(session, user, keep=keep_session)
