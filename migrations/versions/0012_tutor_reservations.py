"""tutor_messages.reserved_tokens: an answer's whole possible cost, held against the budgets
from its question to its end (issue 43, class 3)

Revision ID: 0012
Revises: 0011 (draft quotas)
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tutor_messages") as batch:
        batch.add_column(sa.Column("reserved_tokens", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("tutor_messages") as batch:
        batch.drop_column("reserved_tokens")
