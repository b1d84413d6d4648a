"""drafts: the client that saved each one and its size in bytes, what the anonymous drafts of one
client are counted by (issue 43, free storage)

Revision ID: 0011
Revises: 0010 (tutor card conversations)
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("drafts") as batch:
        batch.add_column(sa.Column("client", sa.String(length=80), nullable=True))
        batch.add_column(sa.Column("size", sa.Integer(), nullable=False, server_default="0"))
    op.create_index(op.f("ix_drafts_client"), "drafts", ["client"])
    # drafts saved before: their size, in bytes (none has a client, so no quota counts them)
    in_bytes = (
        "octet_length(code)" if op.get_bind().dialect.name == "postgresql" else "length(CAST(code AS BLOB))"
    )
    op.execute(f"UPDATE drafts SET size = {in_bytes}")


def downgrade() -> None:
    op.drop_index(op.f("ix_drafts_client"), table_name="drafts")
    with op.batch_alter_table("drafts") as batch:
        batch.drop_column("size")
        batch.drop_column("client")
