"""Database engine, sessions and migrations. One dependency owns commit and rollback."""

import re
import select
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from alembic import command
from alembic.config import Config
from anyio import CapacityLimiter, to_thread
from fastapi import Depends, Request
from sqlalchemy import MetaData, create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from app.config import ROOT


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """A stored time as UTC: SQLite hands back naive datetimes, PostgreSQL aware ones."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# how long a SQLite writer waits for the lock: the web, the worker and a burst of requests share
# one file; waiting beats answering "database is locked" (a 500) on a busy laptop
SQLITE_BUSY_SECONDS = 30


def make_engine(url: str, **options: Any) -> Engine:
    """The engine for ``url`` (``options`` go to create_engine)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(url, **options)
        event.listen(engine, "checkout", _replace_if_closed)
        return engine
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    writer = threading.Lock()
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_SECONDS, "factory": _OneWriter},
        **options,
    )

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn, _record):  # web and worker are separate processes
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        # WAL's own recommendation: a commit is no fsync (8 ms each here, under the write lock,
        # so every writer waited for every other's); still atomic and consistent, and durable
        # when the process dies, only the last commits before a power cut may be undone
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_SECONDS * 1000}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()
        dbapi_conn.writer = writer

    event.listen(engine, "before_cursor_execute", _wait_to_write)
    event.listen(engine, "after_cursor_execute", _done_writing)
    event.listen(engine, "handle_error", lambda context: _done_writing(context.connection))
    return engine


_WRITES = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)


class _OneWriter(sqlite3.Connection):
    """A SQLite connection whose transactions write one at a time in this process, in turn on a
    lock, instead of each asking SQLite and, refused, sleeping in its busy handler (1, 2, 5 … up
    to 100 ms at a time) while the lock is freed and taken again without it: past a few writers
    at once, most of a burst's time went to those sleeps (issue 26). The lock is taken before a
    transaction's first write (pysqlite begins it there) and given back when it ends. Other
    processes (the worker) still meet SQLite's own lock and its busy handler."""

    writer: threading.Lock
    writing = False

    def begin_writing(self) -> None:
        if not self.writing:
            if not self.writer.acquire(timeout=SQLITE_BUSY_SECONDS):
                raise sqlite3.OperationalError("database is locked")
            self.writing = True

    def end_writing(self) -> None:
        if self.writing and not self.in_transaction:
            self.writing = False
            self.writer.release()

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self.end_writing()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.end_writing()

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.writing:
                self.writing = False
                self.writer.release()


def _dbapi(conn: Any) -> Any:
    return conn.connection.dbapi_connection if conn is not None and not conn.closed else None


def _wait_to_write(conn, _cursor, statement: str, *_args) -> None:
    dbapi = _dbapi(conn)
    if isinstance(dbapi, _OneWriter) and _WRITES.match(statement):
        dbapi.begin_writing()


def _done_writing(conn, *_args) -> None:
    """A write outside a transaction (autocommit) is over when its statement is."""
    dbapi = _dbapi(conn)
    if isinstance(dbapi, _OneWriter):
        dbapi.end_writing()


def _replace_if_closed(dbapi_conn, _record, _proxy) -> None:
    """A pooled connection the server has closed (a restart, a failover, an idle timeout) is
    replaced before use, so no request fails on it. Cheaper than a ping at every checkout (a
    round trip, 15 % of a lesson page): an idle connection has nothing to read, so a readable
    socket means the server has hung up or sent its goodbye."""
    fileno = getattr(dbapi_conn, "fileno", None)
    if fileno is None:
        return
    try:
        readable = bool(select.select([fileno()], [], [], 0)[0])
    except (OSError, ValueError, TypeError):  # ValueError: fileno() of a closed connection
        readable = True
    if readable or getattr(dbapi_conn, "closed", False):
        raise DisconnectionError("the database server closed this connection")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str) -> None:
    """Apply every migration (idempotent)."""
    command.upgrade(alembic_config(url), "head")


async def _end(session: Session, finish: Callable[[], None]) -> None:
    """Commit or roll back. On SQLite with nothing left to flush, here on the event loop: with
    the write-ahead log and no fsync it takes a fraction of a millisecond and never waits for
    the write lock (the transaction holds it already, or wrote nothing), while the hand-off to a
    thread and back held this process's write lock (_OneWriter) for as long as the event loop
    and the other threads kept that thread from running, every other writer waiting (a class's
    submissions went at 30 a second; issue 26). Otherwise in a thread, but never by waiting for
    one of the threads that run the routes: those may all be waiting for the connection this
    session holds (past forty requests at once that froze the web until the pool gave up, 30 s
    later). Threads for this are as many as sessions ending, which the gate (app/capacity.py)
    bounds."""
    pending = session.new or session.dirty or session.deleted
    if session.get_bind().dialect.name == "sqlite" and not pending:
        finish()
        return
    await to_thread.run_sync(finish, limiter=CapacityLimiter(1))


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request's session: committed if the route returns, rolled back if it raises. Made
    here on the event loop (no I/O until first use); only the commit or rollback, which talk to
    the database, go to a thread (see _end). A GET or HEAD changes nothing: it reads in
    autocommit, with no transaction to end."""
    if request.method in ("GET", "HEAD"):
        with request.app.state.reader() as session:
            yield session
        return
    factory: sessionmaker[Session] = request.app.state.sessionmaker
    session = factory()
    try:
        yield session
        if session.in_transaction():
            await _end(session, session.commit)
    except BaseException:
        if session.in_transaction():
            await _end(session, session.rollback)
        raise
    finally:
        session.close()  # nothing left to say to the database: the connection is back in the pool


# "function": commit before the response is sent, so a 202 or a 303 never outruns its row
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
