"""Raw results: the full result of a tool call, kept for people behind a ref.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "raw_results",
        sa.Column("ref", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("tool", sa.String(128), nullable=False),
        sa.Column("call_id", sa.String(256), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("expires_at", _TIME, nullable=False),
        sa.Column("media_type", sa.String(128), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )
    # Purging scans by expiry; listings read a tenant's newest records.
    op.create_index("ix_raw_results_expires", "raw_results", ["expires_at"])
    op.create_index("ix_raw_results_tenant_created", "raw_results", ["tenant_id", "created_at"])


def downgrade() -> None:
    op.drop_table("raw_results")
