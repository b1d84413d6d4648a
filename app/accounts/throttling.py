"""Throttling: at most `limit` uses of a key (`signin-ip:1.2.3.4`, `submit-ip:…`) per window.

The uses are ThrottleHit rows, so limits hold across web processes. A use is counted in the
caller's transaction: a caller that answers with an error and still wants it counted commits
first (see the sign-in routes). Reading a key's uses locks the key until that transaction ends
(app/locks.py), so a check and the hit after it are one step: a burst of requests at once is
counted one after another, never all let through on the same count.
"""

from datetime import timedelta
from math import ceil

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app import locks
from app.accounts.models import ThrottleHit
from app.db import aware, utcnow
from app.i18n import ngettext


class Throttled(Exception):
    """Too many attempts: the message says when to retry (or `message` says why, and what to do);
    `retry_after` is in seconds."""

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        minutes = max(1, ceil(retry_after / 60))
        if message is None and retry_after < 60:
            message = ngettext(
                "Too many attempts. Try again in %(num)d second.",
                "Too many attempts. Try again in %(num)d seconds.",
                retry_after,
            ) % {"num": retry_after}
        super().__init__(
            message
            or ngettext(
                "Too many attempts. Try again in %(num)d minute.",
                "Too many attempts. Try again in %(num)d minutes.",
                minutes,
            )
            % {"num": minutes}
        )
        self.retry_after = retry_after


def spend(session: Session, key: str, limit: int, window: timedelta) -> None:
    """Count one use of `key`; Throttled once it was used `limit` times within `window`."""
    check(session, key, limit, window)
    hit(session, key, window)


def check(session: Session, key: str, limit: int, window: timedelta) -> None:
    """Throttled, with the seconds to wait, when `key` was used `limit` times within `window`."""
    if wait := retry_after(session, key, limit, window):
        raise Throttled(wait)


def retry_after(session: Session, key: str, limit: int, window: timedelta) -> int | None:
    """Seconds until `key` may be used again, or None when it is under its limit. Locks `key`."""
    locks.hold(session, f"throttle:{key}")
    now = utcnow()
    times = session.scalars(
        select(ThrottleHit.created_at)
        .where(ThrottleHit.key == key, ThrottleHit.created_at > now - window)
        .order_by(ThrottleHit.created_at)
    ).all()
    if len(times) < limit:
        return None
    return max(1, ceil((aware(times[-limit]) + window - now).total_seconds()))


def delay(session: Session, key: str, free: int, window: timedelta, longest: timedelta) -> int | None:
    """Seconds to wait before `key` may be tried again, or None: after `free` uses within `window`,
    each further try waits twice as long after the latest use as the one before (1, 2, 4… s, at
    most `longest`). Slows guessing from everywhere at once without a lockout. Locks `key`."""
    locks.hold(session, f"throttle:{key}")
    now = utcnow()
    times = session.scalars(
        select(ThrottleHit.created_at).where(ThrottleHit.key == key, ThrottleHit.created_at > now - window)
    ).all()
    if len(times) < free:
        return None
    wait = min(longest.total_seconds(), 2.0 ** min(len(times) - free, 30))
    left = (aware(max(times)) + timedelta(seconds=wait) - now).total_seconds()
    return ceil(left) if left > 0 else None


def hit(session: Session, key: str, window: timedelta) -> None:
    """Count one use of `key` (and forget the uses older than `window`)."""
    now = utcnow()
    session.execute(delete(ThrottleHit).where(ThrottleHit.key == key, ThrottleHit.created_at <= now - window))
    session.add(ThrottleHit(key=key, created_at=now))


def forget(session: Session, key: str) -> None:
    """Every counted use of `key` (a sign-in that succeeded clears its address's failures)."""
    session.execute(delete(ThrottleHit).where(ThrottleHit.key == key))
