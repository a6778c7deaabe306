"""State shared by the workers of one service: guard counts, handed-out secret handles, run leases.

Adds `guard_conversations` (one row per tenant and conversation: its denial count,
moved by an atomic upsert), `guard_targets` (the targets denied in a conversation and
the tools they were denied to), `secret_handles` (which secret handles were handed out
for which tenant: names only, never a value), and to `runs` the lease of a RUNNING run
(`lease_owner`, `lease_until`) with an index for finding expired ones.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "guard_conversations",
        sa.Column("tenant_id", sa.String(256), primary_key=True),
        sa.Column("conversation", sa.String(256), primary_key=True),
        sa.Column("denials", sa.Integer(), nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
    )
    op.create_index("ix_guard_conversations_updated", "guard_conversations", ["updated_at"])
    op.create_table(
        "guard_targets",
        sa.Column("tenant_id", sa.String(256), primary_key=True),
        sa.Column("conversation", sa.String(256), primary_key=True),
        sa.Column("target", sa.String(512), primary_key=True),
        sa.Column("tool", sa.String(256), primary_key=True),
    )
    op.create_table(
        "secret_handles",
        sa.Column("tenant_id", sa.String(256), primary_key=True),
        sa.Column("handle", sa.String(128), primary_key=True),
        sa.Column("first_at", _TIME, nullable=False),
    )
    # Nullable columns: an ALTER TABLE ADD COLUMN on every dialect, no table rewrite.
    op.add_column("runs", sa.Column("lease_owner", sa.String(256)))
    op.add_column("runs", sa.Column("lease_until", _TIME))
    op.create_index("ix_runs_state_lease", "runs", ["state", "lease_until"])


def downgrade() -> None:
    op.drop_index("ix_runs_state_lease", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("lease_until")
        batch.drop_column("lease_owner")
    op.drop_table("secret_handles")
    op.drop_table("guard_targets")
    op.drop_table("guard_conversations")
