"""Migrations build the schema the models describe, on SQLite and on PostgreSQL."""

import time

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

import app.models  # noqa: F401
from app.config import Settings
from app.db import Base, make_engine, upgrade
from app.main import create_app


def test_migrations_from_empty_match_the_models(empty_database_url):
    database_url = empty_database_url
    upgrade(database_url)
    upgrade(database_url)  # idempotent
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            assert "quiz_attempts" in inspect(conn).get_table_names()
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == [], f"models and migrations differ: {diff}"
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_connection_the_server_closed_is_replaced_not_failed(postgres_url):
    """After a database restart or failover the pool holds dead connections: the next request
    gets a fresh one instead of an error."""
    engine = make_engine(postgres_url)
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            killed = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": killed}).scalar()
        deadline = time.monotonic() + 30
        with admin.connect() as conn:  # the backend is gone once the server says so
            while (
                conn.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": killed}
                ).scalar()
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar() != killed
    finally:
        engine.dispose()
        admin.dispose()


def test_the_web_keeps_as_many_connections_as_it_is_told(sqlite_url):
    """Both pools (writes, GET reads) hold TREINO_WEB_CONCURRENCY connections and never more:
    the gate (app/capacity.py) lets in no more requests than that, so no checkout waits."""
    app = create_app(Settings(database_url=sqlite_url, web_concurrency=7, _env_file=None))
    engines = [app.state.sessionmaker.kw["bind"], app.state.reader.kw["bind"]]
    try:
        pools = [(engine.pool.size(), engine.pool._max_overflow) for engine in engines]
        assert pools == [(7, 0), (7, 0)]
    finally:
        for engine in engines:
            engine.dispose()


def test_sqlite_writers_take_turns_on_a_lock_and_readers_never_wait(tmp_path):
    """In one process a SQLite transaction that writes holds the write lock until it ends, and
    the next writer goes on the moment it does (not after a busy-handler sleep); reads, and
    a transaction that has only read, never wait for it; a rollback, a failed statement and a
    write outside a transaction give the lock back."""
    import threading

    engine = make_engine(f"sqlite:///{tmp_path / 'turns.db'}")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (n INTEGER PRIMARY KEY)"))
        writing = engine.connect()
        writing.begin()
        writing.execute(text("INSERT INTO t VALUES (1)"))
        got_in = threading.Event()

        def second_writer() -> None:
            with engine.begin() as conn:
                conn.execute(text("SELECT count(*) FROM t")).scalar()  # a read does not wait
                conn.execute(text("INSERT INTO t VALUES (2)"))
                got_in.set()

        other = threading.Thread(target=second_writer)
        other.start()
        assert not got_in.wait(0.3), "a second writer wrote while the first held the lock"
        with engine.connect() as reader:  # and a reader meanwhile sees the last commit, at once
            assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 0
        writing.commit()
        assert got_in.wait(5)
        other.join(5)
        writing.close()

        with engine.connect() as conn, conn.begin() as transaction:  # a rollback gives it back
            conn.execute(text("INSERT INTO t VALUES (3)"))
            transaction.rollback()
        # a failed write, rolled back on the way out
        with engine.connect() as conn, pytest.raises(Exception, match="UNIQUE"), conn.begin():
            conn.execute(text("INSERT INTO t VALUES (1)"))
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("INSERT INTO t VALUES (4)"))
        with engine.begin() as conn:  # the lock is free: this does not wait 30 s and fail
            conn.execute(text("INSERT INTO t VALUES (5)"))
            assert sorted(conn.execute(text("SELECT n FROM t")).scalars()) == [1, 2, 4, 5]
    finally:
        engine.dispose()
