"""idempotency keys: an answer or a submission sent again by a page that was offline is stored once

Revision ID: 0009
Revises: 0008 (tutor_messages)
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TABLES = ("quiz_attempts", "submissions")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("idempotency_key", sa.String(length=64), nullable=True))
        op.create_index(op.f(f"ix_{table}_idempotency_key"), table, ["idempotency_key"], unique=True)


def downgrade() -> None:
    for table in TABLES:
        op.drop_index(op.f(f"ix_{table}_idempotency_key"), table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("idempotency_key")
