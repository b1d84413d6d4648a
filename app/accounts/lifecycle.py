"""An account's way back in and way out: one-time password reset links, the export of one's own
data, and deleting the account with everything it owns.

A reset link carries the user id, its expiry and an HMAC (under TREINO_SECRET_KEY) of both with
the account's current password hash: nothing is stored, and the link stops working the moment
the password changes, so it works once.
"""

import hashlib
import hmac
import logging
import smtplib
from base64 import urlsafe_b64encode
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session, sessionmaker

from app import i18n
from app.accounts import throttling
from app.accounts.mail import Mailer
from app.accounts.models import User
from app.accounts.ownership import owned_tables
from app.accounts.passwords import AccountError, check_new_password, hash_password, normalize_email
from app.accounts.service import confirm_password, find_user
from app.accounts.sessions import end_sessions
from app.config import Settings
from app.db import aware, utcnow
from app.i18n import gettext as _

log = logging.getLogger(__name__)

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


def reset_link(settings: Settings, token: str) -> str:
    """The link a reset token travels in: under TREINO_PUBLIC_URL, never a request's Host."""
    return f"{settings.site_url()}/reset-password?{urlencode({'token': token})}"


def mail_reset_link(
    sessions: sessionmaker[Session], sender: Mailer, settings: Settings, email: str, lang: str
) -> None:
    """Mail `email` a reset link if it has an account and was not sent RESETS_PER_EMAIL links
    this hour. Run after the answer was sent (the forgot-password page answers every address
    alike, at once), so neither the answer nor its timing says whether the address is known."""
    i18n.set_lang(lang)
    digest = hashlib.sha256(normalize_email(email).encode()).hexdigest()[:40]  # no address at rest
    with sessions.begin() as session:
        user = find_user(session, email)
        if user is None or throttling.retry_after(
            session, f"reset-email:{digest}", RESETS_PER_EMAIL, RESET_WINDOW
        ):
            return
        throttling.hit(session, f"reset-email:{digest}", RESET_WINDOW)
        to, link = user.email, reset_link(settings, reset_token(user, settings.secret_key.get_secret_value()))
    try:
        _send_reset(sender, to, link)
    except (OSError, smtplib.SMTPException):  # the learner was answered already: the log says it
        log.exception("the password reset mail could not be sent")


def _send_reset(sender: Mailer, to: str, link: str) -> None:
    sender.send(
        to,
        _("Your treino password"),
        _(
            "Someone, probably you, asked to choose a new password for your treino account.\n\n"
            "Open this link within an hour to choose it (it works once):\n%(link)s\n\n"
            "If it was not you, ignore this message: your password stays as it is."
        )
        % {"link": link},
    )


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
