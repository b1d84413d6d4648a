"""The queue tells who waits one way (issue 47): the trigger of 0007, which sends NOTIFY
treino_status when a submission's status changes, also fires when a submission is inserted, so a
new job wakes the workers from the database as every other change does (it was a pg_notify on
treino_jobs sent from Python at enqueue). app/submissions/queue.py's CHANNEL. Nothing on SQLite.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        """
        CREATE TRIGGER submissions_insert_notify AFTER INSERT ON submissions
        FOR EACH ROW EXECUTE FUNCTION treino_status_notify()
        """
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER submissions_insert_notify ON submissions")
