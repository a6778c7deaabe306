"""Runs in the SQL stores: one row per run, moved on by compare-and-set on its version.

`SqlRuns` is the part of `SqlStore` that keeps agent runs; it never reads what a run's
document holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from handrail.runs import RunRecord, RunState, check_successor
from handrail.store._rows import run_of, run_row, utc
from handrail.store._statements import SELECT_RUN, UPDATE_RUN
from handrail.store._tables import runs

if TYPE_CHECKING:
    from handrail.store._statements import Statements

__all__ = ["SqlRuns"]

T = TypeVar("T")


class SqlRuns:
    """The run methods of `SqlStore` (a mixin over its engine and helpers)."""

    _engine: sa.Engine
    _sql: Statements

    if TYPE_CHECKING:

        def _write(
            self,
            what: str,
            work: Callable[[sa.Connection], T],
            connection: sa.Connection | None,
            *,
            single: bool = False,
        ) -> T: ...

        def _read(
            self,
            what: str,
            work: Callable[[sa.Connection], T],
            connection: sa.Connection | None,
        ) -> T: ...

    def insert_run(self, record: RunRecord) -> bool:
        """Insert unless the id exists: INSERT ... ON CONFLICT DO NOTHING."""
        row = run_row(record)
        return self._write(
            "run insert",
            lambda c: c.execute(self._sql.insert_run, row).rowcount == 1,
            None,
            single=True,
        )

    def update_run(self, record: RunRecord, *, expect_version: int) -> bool:
        """Compare-and-set on the version: one UPDATE ... WHERE run_id AND version."""
        check_successor(record, expect_version=expect_version)
        params = {
            "k_run": record.run_id,
            "k_version": expect_version,
            "v_state": record.state.value,
            "v_version": record.version,
            "v_at": utc(record.updated_at),
            "v_data": record.data,
        }
        return self._write(
            "run update",
            lambda c: c.execute(UPDATE_RUN, params).rowcount == 1,
            None,
            single=True,
        )

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run of an id."""

        def read(c: sa.Connection) -> RunRecord | None:
            row = c.execute(SELECT_RUN, {"k_run": run_id}).mappings().first()
            return None if row is None else run_of(row)

        return self._read("run read", read, None)

    def list_runs(
        self,
        *,
        tenant_id: str | None = None,
        state: RunState | None = None,
        user_id: str | None = None,
        limit: int = 50,
    ) -> list[RunRecord]:
        """Matching runs, most recently updated first."""
        query = sa.select(runs).order_by(runs.c.updated_at.desc(), runs.c.run_id.desc())
        if tenant_id is not None:
            query = query.where(runs.c.tenant_id == tenant_id)
        if state is not None:
            query = query.where(runs.c.state == state.value)
        if user_id is not None:
            query = query.where(runs.c.user_id == user_id)
        query = query.limit(max(0, limit))
        return self._read(
            "runs read",
            lambda c: [run_of(r) for r in c.execute(query).mappings()],
            None,
        )
