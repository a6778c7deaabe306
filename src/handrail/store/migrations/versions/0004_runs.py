"""Runs: the durable state of agent runs, for suspend, resume and replay.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )
    # Listings read a tenant's most recently updated runs.
    op.create_index("ix_runs_tenant_updated", "runs", ["tenant_id", "updated_at"])


def downgrade() -> None:
    op.drop_table("runs")
