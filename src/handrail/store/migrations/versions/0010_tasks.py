"""Tasks: the record of each long tool call run asynchronously by a task runner.

Adds `tasks` (keyed by task id, which derives from the intent's idempotency key): who
asked (tenant, user, principal snapshot), the tool and its arguments, the queue, the
state with attempts, progress, lease holder and last heartbeat, a cancellation request,
how it ended (error code, a small result or the raw store's reference), its times, and
a version moved by compare-and-set, and the generation of its intent (a read asked
again after its dedupe window is a new task: the intent's next generation).

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(40), primary_key=True),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("tool", sa.String(256), nullable=False),
        sa.Column("intent_key", sa.String(256), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("progress_message", sa.String(200)),
        sa.Column("lease_holder", sa.String(256)),
        sa.Column("heartbeat_at", _TIME),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("error_code", sa.String(64)),
        sa.Column("error_message", sa.Text()),
        sa.Column("result", sa.Text()),
        sa.Column("result_ref", sa.String(128)),
        sa.Column("estimate_seconds", sa.Float()),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("started_at", _TIME),
        sa.Column("finished_at", _TIME),
        sa.Column("retry_at", _TIME),
        sa.Column("expires_at", _TIME, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index("ix_tasks_tenant_created", "tasks", ["tenant_id", "created_at"])
    op.create_index("ix_tasks_intent_generation", "tasks", ["intent_key", "generation"])


def downgrade() -> None:
    op.drop_table("tasks")
