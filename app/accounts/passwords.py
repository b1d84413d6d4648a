"""Passwords and addresses: the rules a new password must meet, hashing, and the refusal
(AccountError) every account operation raises for something the learner can fix.

argon2id at ASVS 5.0 appendix C's t=2, m=19 MiB, p=1: ~70 ms on a small host. Hashes made with
other parameters are upgraded at the next sign-in (verify() hands back the new hash).
"""

import secrets
from functools import cache
from pathlib import Path

from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from app.i18n import gettext as _
from app.i18n import ngettext

PASSWORD_MIN = 8
PASSWORD_MAX = 1024  # argon2 takes any length; a bound keeps one request from costing much
EMAIL_MAX = 254

_hasher = PasswordHash((Argon2Hasher(time_cost=2, memory_cost=19 * 1024, parallelism=1),))


class AccountError(Exception):
    """A refusal the learner can act on: str() is the message in their language; `field` names
    the form field it is about, if one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def normalize_email(email: str) -> str:
    return email.strip().lower()


@cache
def common_passwords() -> frozenset[str]:
    lines = (Path(__file__).parent / "common-passwords.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def check_new_password(password: str, email: str, field: str = "password") -> None:
    """AccountError on `field` unless `password` may be the account's new password."""
    if not password.strip():
        raise AccountError(_("A password cannot be only spaces."), field)
    if len(password) < PASSWORD_MIN:
        raise AccountError(
            ngettext("Use at least %(num)d character.", "Use at least %(num)d characters.", PASSWORD_MIN)
            % {"num": PASSWORD_MIN},
            field,
        )
    if len(password) > PASSWORD_MAX:
        raise AccountError(
            ngettext("Use at most %(num)d character.", "Use at most %(num)d characters.", PASSWORD_MAX)
            % {"num": PASSWORD_MAX},
            field,
        )
    lowered = password.lower()
    if lowered in common_passwords() or lowered == email or lowered == email.split("@")[0]:
        raise AccountError(
            _(
                "This password is too common or too easy to guess. A few unrelated "
                "words make a strong one that is easy to remember."
            ),
            field,
        )


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify(password: str, stored_hash: str | None) -> tuple[bool, str | None]:
    """(whether `password` matches, a new hash to store when the stored one is outdated). With no
    stored hash (no such account) it takes as long and fails, so timing tells nobody who is
    registered."""
    password = password[: PASSWORD_MAX + 1]
    if stored_hash is None:
        _hasher.verify(password, _dummy_hash())
        return False, None
    return _hasher.verify_and_update(password, stored_hash)


@cache
def _dummy_hash() -> str:
    return _hasher.hash(secrets.token_urlsafe(16))
