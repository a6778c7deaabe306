"""Plans, used confirmation nonces, approvals and execution records.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "plans",
        sa.Column("plan_id", sa.String(64), primary_key=True),
        sa.Column("tool", sa.String(128), nullable=False),
        sa.Column("schema_version", sa.String(64), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("expected_version", sa.String(256)),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("risk", sa.Integer(), nullable=False),
        sa.Column("confirmation", sa.String(16), nullable=False),
        sa.Column("required_approvals", sa.Integer(), nullable=False),
        sa.Column("impact", sa.Text(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("expires_at", _TIME, nullable=False),
        sa.Column("revises", sa.String(64)),
        sa.Column("approver_permission", sa.String(256)),
        sa.Column("plan_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
    )
    op.create_index("ix_plans_tenant_created", "plans", ["tenant_id", "created_at"])
    op.create_table(
        "plan_nonces",
        sa.Column("nonce", sa.String(64), primary_key=True),
        sa.Column("plan_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("used_at", _TIME, nullable=False),
    )
    op.create_table(
        "plan_approvals",
        sa.Column("plan_id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(256), primary_key=True),
        sa.Column("approved_at", _TIME, nullable=False),
    )
    op.create_table(
        "executions",
        sa.Column("idempotency_key", sa.String(80), primary_key=True),
        sa.Column("plan_id", sa.String(64)),
        sa.Column("plan_hash", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(128), nullable=False),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("expected_version", sa.String(256)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("business_id", sa.String(256)),
        sa.Column("result", sa.Text()),
        sa.Column("error_code", sa.String(64)),
        sa.Column("lease_owner", sa.String(128)),
        sa.Column("lease_expires_at", _TIME),
        sa.Column("next_check_at", _TIME),
        sa.Column("checks", sa.Integer(), nullable=False),
        sa.Column("escalated", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.Column("retain_until", _TIME),
        sa.Column("version", sa.Integer(), nullable=False),
    )
    op.create_index("ix_executions_status_check", "executions", ["status", "next_check_at"])
    op.create_index("ix_executions_status_lease", "executions", ["status", "lease_expires_at"])
    op.create_index("ix_executions_retain", "executions", ["retain_until"])
    op.create_index("ix_executions_plan", "executions", ["plan_id"])


def downgrade() -> None:
    op.drop_table("executions")
    op.drop_table("plan_approvals")
    op.drop_table("plan_nonces")
    op.drop_table("plans")
