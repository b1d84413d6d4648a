"""The job queue is the submissions table: claim, lease, renew, finish, give up.

Claiming is one UPDATE … WHERE id = (oldest claimable) RETURNING: on PostgreSQL the inner SELECT
takes its row FOR UPDATE SKIP LOCKED, so concurrent workers never pick the same job; on SQLite
the statement is a write transaction of its own, which SQLite serialises. A job's lease is
renewed while it runs; a job whose lease expired (its worker died) is claimed again, and after
`max_attempts` claims it ends as `error` instead. Finishing checks the lease, so a worker that
lost its lease cannot overwrite the verdict another worker wrote.
"""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import CursorResult, Result, and_, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.db import utcnow
from app.submissions.models import Status, Submission
from app.submissions.service import NOTIFY_CHANNEL, serving_rank
from contracts.verdict import Record, trouble

__all__ = ["NOTIFY_CHANNEL", "Job", "claim", "finish", "renew", "give_up_abandoned"]


@dataclass(frozen=True)
class Job:
    id: int
    exercise: str
    mode: str
    code: str
    lang: str
    attempts: int
    request_id: str | None


def _claimable(now: datetime):
    return or_(
        Submission.status == Status.QUEUED,
        and_(Submission.status == Status.RUNNING, Submission.lease_expires_at < now),
    )


def claim(sessions: sessionmaker[Session], worker: str, lease: timedelta, max_attempts: int) -> Job | None:
    """Take the next queued (or abandoned) job, or None. Clients are served in turn: the job
    of the client served longest ago comes first (a client never served: as if served when the
    job was queued), the oldest job among equals; so one address sending many jobs waits behind
    its own, and a new address waits behind those queued before it."""
    give_up_abandoned(sessions, max_attempts)
    now = utcnow()
    oldest = (
        select(Submission.id)
        .where(_claimable(now))
        .order_by(serving_rank(), Submission.id)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    with sessions.begin() as session:
        row = session.execute(
            update(Submission)
            .where(Submission.id == oldest, _claimable(now))
            .values(
                status=Status.RUNNING,
                lease_owner=worker,
                lease_expires_at=now + lease,
                attempts=Submission.attempts + 1,
                started_at=now,
            )
            .returning(
                Submission.id,
                Submission.exercise,
                Submission.mode,
                Submission.code,
                Submission.lang,
                Submission.attempts,
                Submission.request_id,
            )
            .execution_options(synchronize_session=False)
        ).first()
    return Job(*row) if row else None


def _one_row(result: Result[*tuple[object, ...]]) -> bool:
    """Whether an UPDATE changed exactly one row. A session types every result as a plain
    Result; an UPDATE's is a CursorResult, the one that counts rows."""
    assert isinstance(result, CursorResult)
    return result.rowcount == 1


def renew(sessions: sessionmaker[Session], job_id: int, worker: str, lease: timedelta) -> bool:
    """Extend the lease; False when this worker no longer holds the job."""
    with sessions.begin() as session:
        result = session.execute(
            update(Submission)
            .where(
                Submission.id == job_id, Submission.lease_owner == worker, Submission.status == Status.RUNNING
            )
            .values(lease_expires_at=utcnow() + lease)
            .execution_options(synchronize_session=False)
        )
    return _one_row(result)


def finish(sessions: sessionmaker[Session], job_id: int, worker: str, verdict: Record) -> bool:
    """Store the verdict and end the job; False (and nothing written) if the lease was lost.
    ValueError for a verdict that is not strict JSON (NaN, infinity): no database is asked to
    store what one of them refuses."""
    json.dumps(verdict, allow_nan=False)
    with sessions.begin() as session:
        result = session.execute(
            update(Submission)
            .where(
                Submission.id == job_id, Submission.lease_owner == worker, Submission.status == Status.RUNNING
            )
            .values(
                status=verdict["status"],
                verdict=verdict,
                finished_at=utcnow(),
                active_owner=None,
                lease_owner=None,
                lease_expires_at=None,
            )
            .execution_options(synchronize_session=False)
        )
    return _one_row(result)


def give_up_abandoned(sessions: sessionmaker[Session], max_attempts: int) -> int:
    """Jobs whose lease expired after `max_attempts` claims end as `error`, with a message."""
    now = utcnow()
    with sessions.begin() as session:
        rows = session.execute(
            select(Submission.id, Submission.exercise).where(
                Submission.status == Status.RUNNING,
                Submission.lease_expires_at < now,
                Submission.attempts >= max_attempts,
            )
        ).all()
        for job_id, exercise in rows:
            session.execute(
                update(Submission)
                .where(
                    Submission.id == job_id,
                    Submission.status == Status.RUNNING,
                    Submission.lease_expires_at < now,
                )
                .values(
                    status=Status.ERROR,
                    finished_at=now,
                    active_owner=None,
                    lease_owner=None,
                    lease_expires_at=None,
                    verdict=trouble(exercise, "worker-trouble"),
                )
                .execution_options(synchronize_session=False)
            )
    return len(rows)
