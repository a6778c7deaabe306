"""Run entries: a run's steps appended one row each, never the whole run rewritten.

Adds `run_entries` (keyed by run, the version whose write added the row, and its
number within that write). A run's row keeps its header (state, version, budget,
pending plans, end) and moves by compare-and-set as before; each step's new turns,
replies, log and keys go in a new entry row in the same transaction. Runs stored
before keep their whole document in `data` and read as they did.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_entries",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("n", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("data", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_entries")
