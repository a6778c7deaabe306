"""Execution tombstones: a purged record keeps its key, status and business id for good.

Adds `executions.purged_at`: set when the retention purge strips a settled record to a
tombstone instead of deleting it, so its key stays taken. Rows purged before this
revision were deleted and cannot be brought back.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("executions", sa.Column("purged_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    # SQLite before 3.35 cannot drop a column in place; a batch copies the table.
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("purged_at")
