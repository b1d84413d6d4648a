"""Migrations build the schema the models describe, on SQLite and on PostgreSQL."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

import app.models  # noqa: F401
from app.db import Base, upgrade


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
