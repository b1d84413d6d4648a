"""An account's way back in and way out: one-time password reset links, the export of one's own
data, and deleting the account with everything it owns.

A reset link carries the user id, its expiry and an HMAC (under TREINO_SECRET_KEY) of both with
the account's current password hash: nothing is stored, and the link stops working the moment
the password changes, so it works once.
"""

import hashlib
import hmac
from base64 import urlsafe_b64encode
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from app.accounts.models import User
from app.accounts.ownership import owned_tables
from app.accounts.passwords import AccountError, check_new_password, hash_password
from app.accounts.service import confirm_password
from app.accounts.sessions import end_sessions
from app.db import aware, utcnow
from app.i18n import gettext as _

RESET_LIFETIME = timedelta(hours=1)
RESET_WINDOW = timedelta(hours=1)
RESETS_PER_EMAIL = 3  # links asked for one address per window
RESETS_PER_IP = 20


def _mac(secret: str, payload: str, password_hash: str) -> str:
    digest = hmac.new(secret.encode(), f"reset:{payload}:{password_hash}".encode(), hashlib.sha256).digest()
    return urlsafe_b64encode(digest[:24]).decode().rstrip("=")


def reset_token(user: User, secret: str, now: datetime | None = None) -> str:
    """A token for one password reset of `user`, valid for RESET_LIFETIME."""
    expires = int(((now or utcnow()) + RESET_LIFETIME).timestamp())
    payload = f"{user.id}.{expires}"
    return f"{payload}.{_mac(secret, payload, user.password_hash)}"


def _invalid() -> AccountError:
    return AccountError(
        _(
            "This link does not work any more: it was used already, it is older than an "
            "hour, or it was copied incompletely. Ask for a new one."
        )
    )


def user_for_token(session: Session, token: str, secret: str) -> User:
    """The account a reset token is for; AccountError when it is invalid, expired or used."""
    parts = token.split(".")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or len(token) > 200:
        raise _invalid()
    user = session.get(User, int(parts[0]))
    if user is None or utcnow().timestamp() > int(parts[1]):
        raise _invalid()
    if not hmac.compare_digest(parts[2], _mac(secret, f"{parts[0]}.{parts[1]}", user.password_hash)):
        raise _invalid()
    return user


def reset_password(session: Session, token: str, new: str, secret: str) -> User:
    """Set the new password of the token's account and sign out every device and API token."""
    user = user_for_token(session, token, secret)
    check_new_password(new, user.email)
    user.password_hash = hash_password(new)
    end_sessions(session, user)
    return user


def _plain(value: Any) -> Any:
    return aware(value).isoformat() if isinstance(value, datetime) else value


def export(session: Session, user: User) -> dict[str, Any]:
    """Everything the account owns, as JSON-ready data: one list per kind of row."""
    data: dict[str, Any] = {
        "account": {"email": user.email, "lang": user.lang, "created_at": _plain(user.created_at)},
        "exported_at": _plain(utcnow()),
    }
    for table in owned_tables():
        rows = session.execute(select(table).where(table.c.user_id == user.id).order_by(table.c.id))
        data[table.name] = [
            {key: _plain(value) for key, value in row.items() if key not in ("user_id", "visitor_id")}
            for row in rows.mappings()
        ]
    return data


def delete_account(session: Session, user: User, password: str, *, ip: str, visitor_id: str) -> None:
    """Delete the account (its password proves the owner) and every row it or this browser's
    anonymous visitor owns: progress, answers, drafts, submissions, sessions."""
    confirm_password(
        session, user, password, ip=ip, message=_("The password is not right."), field="password"
    )
    for table in owned_tables():
        session.execute(
            delete(table).where(
                or_(
                    table.c.user_id == user.id, (table.c.visitor_id == visitor_id) & table.c.user_id.is_(None)
                )
            )
        )
    end_sessions(session, user)
    session.execute(delete(User).where(User.id == user.id))
