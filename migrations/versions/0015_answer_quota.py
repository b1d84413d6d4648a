"""quiz_attempts and cards_reached: the client each row came from, what the anonymous answers and
cards reached of one client are counted by (issue 43: a quota on everything a free visitor can
store; rows from before have none, so no quota counts them)

Revision ID: 0015
Revises: 0014 (the queue's insert notify)
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TABLES = ("quiz_attempts", "cards_reached")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("client", sa.String(length=80), nullable=True))
        op.create_index(op.f(f"ix_{table}_client"), table, ["client"])


def downgrade() -> None:
    for table in TABLES:
        op.drop_index(op.f(f"ix_{table}_client"), table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("client")
