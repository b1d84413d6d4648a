"""tutor_messages about a lesson card: a `card` key beside `exercise`, either one set (issue 30)

Revision ID: 0010
Revises: 0009 (idempotency keys)
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tutor_messages") as batch:
        batch.add_column(sa.Column("card", sa.String(length=200), nullable=True))
        batch.alter_column("exercise", existing_type=sa.String(length=120), nullable=True)
    op.create_index(op.f("ix_tutor_messages_card"), "tutor_messages", ["card"])


def downgrade() -> None:
    op.execute("DELETE FROM tutor_messages WHERE exercise IS NULL")
    op.drop_index(op.f("ix_tutor_messages_card"), table_name="tutor_messages")
    with op.batch_alter_table("tutor_messages") as batch:
        batch.alter_column("exercise", existing_type=sa.String(length=120), nullable=False)
        batch.drop_column("card")
