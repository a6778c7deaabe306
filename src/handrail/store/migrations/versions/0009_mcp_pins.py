"""MCP pins: the approved definition of each tool imported from an upstream MCP server.

Adds `mcp_pins` (keyed by upstream and tool name): the canonical definition text and
its SHA-256 as an operator approved it, who did and when, and a version moved by
compare-and-set. A tool whose definition upstream no longer hashes the same is not
served until it is approved again.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "mcp_pins",
        sa.Column("upstream", sa.String(64), primary_key=True),
        sa.Column("tool", sa.String(128), primary_key=True),
        sa.Column("definition_hash", sa.String(64), nullable=False),
        sa.Column("definition", sa.Text(), nullable=False),
        sa.Column("approved_by", sa.String(256), nullable=False),
        sa.Column("approved_at", _TIME, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("mcp_pins")
