"""the client each submission came from (the queue serves clients in turn), and how each worker
bounds a job's memory (a cgroup, or its own watch where none can be had)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("client", sa.String(length=80), nullable=True))
    op.create_index("ix_submissions_client_started_at", "submissions", ["client", "started_at"])
    with op.batch_alter_table("worker_beats") as batch:
        batch.add_column(sa.Column("limits", sa.String(length=16), nullable=False, server_default="cgroup"))


def downgrade() -> None:
    with op.batch_alter_table("worker_beats") as batch:
        batch.drop_column("limits")
    op.drop_index("ix_submissions_client_started_at", table_name="submissions")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("client")
