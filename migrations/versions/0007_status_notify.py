"""PostgreSQL tells who waits when a submission's status changes: a trigger sends NOTIFY
treino_status with the row's id (delivered at commit), whoever changed it (the worker claiming or
finishing it, a cancel, a lease given up); the web's watcher (app/submissions/watch.py) listens.
Nothing on SQLite, where the watcher reads the rows instead.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        """
        CREATE FUNCTION treino_status_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('treino_status', NEW.id::text);
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER submissions_status_notify AFTER UPDATE OF status ON submissions
        FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
        EXECUTE FUNCTION treino_status_notify()
        """
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER submissions_status_notify ON submissions")
    op.execute("DROP FUNCTION treino_status_notify()")
