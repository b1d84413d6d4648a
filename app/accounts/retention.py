"""Anonymous data is pruned after a time without use (TREINO_ANONYMOUS_DAYS, issue 43).

A visitor without an account is only a browser cookie: once none of their rows, in any table of
learners' own rows (accounts.ownership.owned_tables: drafts, quick-check answers, cards reached,
submissions, tutor conversations…), was written within the time, every one of them goes. A
visitor who used anything since keeps it all; an account's rows are never touched. Throttling's
counts older than the time go too (no limit looks back further than an hour).

A row's last use is the latest of its own time columns (a draft's `updated_at`, a
submission's `finished_at`…), so a new owned table is covered without being named here.
The worker runs this every hour (worker/runner.py), one batch of visitors per transaction.
"""

from datetime import datetime

from sqlalchemy import ColumnElement, DateTime, Exists, FromClause, Table, and_, delete, exists, or_, select
from sqlalchemy.orm import Session

from app import locks
from app.accounts.models import ThrottleHit
from app.accounts.ownership import owned_tables

BATCH = 200  # visitors per transaction: a long prune never holds SQLite's write lock for long


def prune(session: Session, before: datetime, batch: int = BATCH) -> int:
    """Delete the rows of up to `batch` anonymous visitors who used nothing since `before`, and
    throttle counts older than it; how many visitors went (0: none is left). Commit after each
    call. One prune at a time, whatever the workers (its own lock)."""
    locks.hold(session, "retention")
    session.execute(delete(ThrottleHit).where(ThrottleHit.created_at < before))
    visitors = _unused_since(session, before, batch)
    if not visitors:
        return 0
    for table in owned_tables():
        session.execute(
            delete(table).where(
                table.c.visitor_id.in_(visitors),
                table.c.user_id.is_(None),
                ~_used_since(table, before),  # written a moment ago, after the batch was chosen: kept
            )
        )
    return len(visitors)


def _unused_since(session: Session, before: datetime, batch: int) -> list[str]:
    """Up to `batch` anonymous visitors with rows, none of them written since `before`."""
    tables = owned_tables()
    for table in tables:
        found = session.scalars(
            select(table.c.visitor_id)
            .where(table.c.user_id.is_(None), *(~_visitor_used(table, other, before) for other in tables))
            .distinct()
            .limit(batch)
        ).all()
        if found:
            return list(found)
    return []


def _visitor_used(table: Table, other: Table, before: datetime) -> Exists:
    """The visitor of `table`'s row has an anonymous row in `other` written since `before`."""
    theirs = other.alias()
    return exists().where(
        theirs.c.visitor_id == table.c.visitor_id, theirs.c.user_id.is_(None), _used_since(theirs, before)
    )


def _used_since(table: FromClause, before: datetime) -> ColumnElement[bool]:
    """A row of `table` written at or after `before` (any of its time columns; never NULL)."""
    times = [column for column in table.columns if isinstance(column.type, DateTime)]
    assert times, f"{table.description}: an owned table needs a time column, to know when it was last used"
    return or_(*(and_(column.is_not(None), column >= before) for column in times))
