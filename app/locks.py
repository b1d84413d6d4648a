"""Locks named by what they guard (a budget, a throttle's key, a client's queue or storage),
held until the session's transaction ends: what makes "count, then insert" under a limit one
step, however many requests and web processes do it at once (issue 43). The caller counts
after `hold` and inserts in the same transaction; the lock goes with its commit or rollback.

PostgreSQL: an advisory transaction lock per name, the names of one call taken in one order
(two callers that share some names never wait for each other in a circle). SQLite has a
single writer: `hold` takes the database's write lock now, before the count is read, whatever
the names (a deferred transaction would take it only at the insert, after every caller had
read the same count). Never in an autocommit session (GET's reader): its lock would end with
the statement."""

import hashlib

from sqlalchemy import text
from sqlalchemy.orm import Session


def key(name: str) -> int:
    """`name` as a PostgreSQL advisory lock key (a signed 64-bit number)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


def hold(session: Session, *names: str) -> None:
    """Hold the locks `names` until the session's transaction ends."""
    if session.get_bind().dialect.name == "postgresql":
        for lock in sorted({key(name) for name in names}):
            session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock})
    else:  # a write that changes nothing: the write lock, from now to the transaction's end
        session.execute(text("UPDATE throttle_hits SET id = id WHERE 0 = 1"))
