from dataclasses import dataclass

from sqlalchemy import and_, delete, func, not_, select
from sqlalchemy.orm import Session

from app import locks
from app.accounts.ownership import Learner, owned_by
from app.db import utcnow
from app.drafts.models import Draft


@dataclass(frozen=True)
class Quota:
    """What the anonymous visitors behind one client may keep as drafts, together."""

    drafts: int
    kb: int


class OverQuota(Exception):
    """This save would take the client's anonymous drafts past its quota: nothing was stored."""


def get(session: Session, learner: Learner, exercise_id: str) -> Draft | None:
    """The learner's newest draft of the exercise."""
    return session.scalar(
        select(Draft)
        .where(owned_by(Draft, learner), Draft.exercise == exercise_id)
        .order_by(Draft.updated_at.desc(), Draft.id.desc())
        .limit(1)
    )


def save(
    session: Session, learner: Learner, exercise_id: str, code: str, *, client: str | None = None
) -> Draft:
    """Upsert: the newest row takes the code (and `client`, the address it came from, when
    given); rows left over from an adoption go."""
    draft = get(session, learner, exercise_id)
    if draft is None:
        draft = Draft(**learner.owner, exercise=exercise_id, code=code, updated_at=utcnow())
        session.add(draft)
    else:
        draft.code, draft.updated_at = code, utcnow()
        session.execute(
            delete(Draft).where(owned_by(Draft, learner), Draft.exercise == exercise_id, Draft.id != draft.id)
        )
    draft.size = bytes_of(code)
    if client is not None:
        draft.client = client
    session.flush()
    return draft


def save_within_quota(
    session: Session, learner: Learner, exercise_id: str, code: str, *, client: str, quota: Quota
) -> Draft:
    """save, unless the learner is anonymous and the save would take the anonymous drafts of
    `client` past `quota` (OverQuota: nothing stored). Every cookie-less request is a new
    visitor, so the quota is the client's, whatever its cookies; a signed-in learner's drafts
    are the account's and are not counted. A save that adds nothing (an edit that is no
    longer, a draft already counted) passes even over the quota. The count is locked until
    the save commits (app/locks.py): a burst of saves is counted one after another."""
    if learner.user is None:
        locks.hold(session, f"drafts:{client}")
        count, size = _stored(session, client)
        this = and_(Draft.visitor_id == learner.visitor_id, Draft.exercise == exercise_id)
        other_count, other_size = _stored(session, client, not_(this))
        new_count, new_size = other_count + 1, other_size + bytes_of(code)
        if (new_count > count and new_count > quota.drafts) or (
            new_size > size and new_size > quota.kb * 1024
        ):
            raise OverQuota
    return save(session, learner, exercise_id, code, client=client)


def bytes_of(code: str) -> int:
    """What a draft of `code` counts for: its UTF-8 bytes."""
    return len(code.encode("utf-8"))


def _stored(session: Session, client: str, *where) -> tuple[int, int]:
    """How many anonymous drafts `client` keeps, and their bytes (of those also matching `where`)."""
    count, size = session.execute(
        select(func.count(), func.coalesce(func.sum(Draft.size), 0)).where(
            Draft.client == client, Draft.user_id.is_(None), *where
        )
    ).one()
    return int(count), int(size)
