from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.accounts.ownership import Learner, owned_by
from app.db import utcnow
from app.drafts.models import Draft


def get(session: Session, learner: Learner, exercise_id: str) -> Draft | None:
    """The learner's newest draft of the exercise."""
    return session.scalar(
        select(Draft)
        .where(owned_by(Draft, learner), Draft.exercise == exercise_id)
        .order_by(Draft.updated_at.desc(), Draft.id.desc())
        .limit(1)
    )


def save(session: Session, learner: Learner, exercise_id: str, code: str) -> Draft:
    """Upsert: the newest row takes the code; rows left over from an adoption go."""
    draft = get(session, learner, exercise_id)
    if draft is None:
        draft = Draft(**learner.owner, exercise=exercise_id, code=code, updated_at=utcnow())
        session.add(draft)
    else:
        draft.code, draft.updated_at = code, utcnow()
        session.execute(
            delete(Draft).where(owned_by(Draft, learner), Draft.exercise == exercise_id, Draft.id != draft.id)
        )
    session.flush()
    return draft
