"""Tool pins in the SQL stores: one row per upstream tool.

`SqlPins` is the part of `SqlStore` that keeps the approved definitions of imported
MCP tools: an insert that loses to an existing row writes nothing, and a re-approval
is a compare-and-set on the version. Never decides what a definition means.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from handrail.pins import PinRecord
from handrail.store._rows import aware, utc
from handrail.store._sql_part import SqlPart
from handrail.store._tables import mcp_pins

__all__ = ["SqlPins"]

_P = mcp_pins.c

_REPLACE = (
    mcp_pins.update()
    .where(
        _P.upstream == sa.bindparam("k_upstream"),
        _P.tool == sa.bindparam("k_tool"),
        _P.version == sa.bindparam("k_version"),
    )
    .values(
        definition_hash=sa.bindparam("v_hash"),
        definition=sa.bindparam("v_definition"),
        approved_by=sa.bindparam("v_by"),
        approved_at=sa.bindparam("v_at", type_=_P.approved_at.type),
        version=sa.bindparam("v_version"),
    )
)


def _row(record: PinRecord) -> dict[str, Any]:
    return {
        "upstream": record.upstream,
        "tool": record.tool,
        "definition_hash": record.definition_hash,
        "definition": record.definition,
        "approved_by": record.approved_by,
        "approved_at": utc(record.approved_at),
        "version": record.version,
    }


def _record(row: sa.RowMapping) -> PinRecord:
    return PinRecord(
        upstream=row["upstream"],
        tool=row["tool"],
        definition_hash=row["definition_hash"],
        definition=row["definition"],
        approved_by=row["approved_by"],
        approved_at=aware(row["approved_at"]),
        version=row["version"],
    )


class SqlPins(SqlPart):
    """The pin methods of `SqlStore` (a mixin over its engine and helpers)."""

    def insert_pin(self, record: PinRecord) -> bool:
        """Insert unless the (upstream, tool) exists: INSERT ... ON CONFLICT DO NOTHING."""
        if record.version != 1:
            msg = "a new pin starts at version 1"
            raise ValueError(msg)
        row = _row(record)
        return self._write(
            "pin insert",
            lambda c: c.execute(self._sql.insert_pin, row).rowcount == 1,
            None,
            single=True,
        )

    def replace_pin(self, record: PinRecord, *, expect_version: int) -> bool:
        """Compare-and-set: one UPDATE ... WHERE upstream, tool and version."""
        if record.version != expect_version + 1:
            msg = "a replaced pin's version is expect_version + 1"
            raise ValueError(msg)
        params = {
            "k_upstream": record.upstream,
            "k_tool": record.tool,
            "k_version": expect_version,
            "v_hash": record.definition_hash,
            "v_definition": record.definition,
            "v_by": record.approved_by,
            "v_at": utc(record.approved_at),
            "v_version": record.version,
        }
        return self._write(
            "pin replace",
            lambda c: c.execute(_REPLACE, params).rowcount == 1,
            None,
            single=True,
        )

    def get_pin(self, upstream: str, tool: str) -> PinRecord | None:
        """The pin of one upstream tool."""
        query = sa.select(mcp_pins).where(_P.upstream == upstream, _P.tool == tool)

        def read(c: sa.Connection) -> PinRecord | None:
            row = c.execute(query).mappings().first()
            return None if row is None else _record(row)

        return self._read("pin read", read, None)

    def list_pins(self, *, upstream: str | None = None) -> list[PinRecord]:
        """Every pin (or one upstream's), by upstream and tool name."""
        query = sa.select(mcp_pins).order_by(_P.upstream, _P.tool)
        if upstream is not None:
            query = query.where(_P.upstream == upstream)
        return self._read(
            "pins read",
            lambda c: [_record(r) for r in c.execute(query).mappings()],
            None,
        )
