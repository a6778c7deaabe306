"""Runs in the SQL stores: a header row moved by compare-and-set, and appended entries.

`SqlRuns` is the part of `SqlStore` that keeps agent runs. A write moves the run's row
from its expected version and inserts its entries (`run_entries`, keyed by the run,
the new version and a number) in one transaction, so a step costs the same whatever
the run's length. A read takes the row, then the entries of versions up to the row's:
entries are written with their version and never after it, so the two always agree.
Never reads what a run's document holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

from handrail.errors import StoreError
from handrail.runs import RunRecord, RunState, check_entries, check_successor
from handrail.store._rows import run_of, run_row, utc
from handrail.store._sql_part import SqlPart
from handrail.store._statements import SELECT_RUN, UPDATE_RUN
from handrail.store._tables import run_entries, runs

__all__ = ["SqlRuns"]

T = TypeVar("T")

_E = run_entries.c

_SELECT_ENTRIES = (
    sa.select(_E.data)
    .where(_E.run_id == sa.bindparam("k_run"), _E.version <= sa.bindparam("k_version"))
    .order_by(_E.version, _E.n)
)


def _entry_rows(run_id: str, version: int, entries: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {"run_id": run_id, "version": version, "n": n, "data": text}
        for n, text in enumerate(entries)
    ]


class SqlRuns(SqlPart):
    """The run methods of `SqlStore` (a mixin over its engine and helpers)."""

    def insert_run(self, record: RunRecord) -> bool:
        """Insert unless the id exists (ON CONFLICT DO NOTHING), then its entries."""
        check_entries(record.entries)
        row = run_row(record)
        if not record.entries:
            return self._write(
                "run insert",
                lambda c: c.execute(self._sql.insert_run, row).rowcount == 1,
                None,
                single=True,
            )
        rows = _entry_rows(record.run_id, record.version, record.entries)
        return self._appending(
            "run insert", lambda c: c.execute(self._sql.insert_run, row).rowcount == 1, rows
        )

    def update_run(self, record: RunRecord, *, expect_version: int) -> bool:
        """Compare-and-set on the version (UPDATE ... WHERE run_id AND version), then entries."""
        check_successor(record, expect_version=expect_version)
        check_entries(record.entries)
        params = {
            "k_run": record.run_id,
            "k_version": expect_version,
            "v_state": record.state.value,
            "v_version": record.version,
            "v_at": utc(record.updated_at),
            "v_data": record.data,
            "v_lease_owner": record.lease_owner,
            "v_lease_until": utc(record.lease_until),
        }
        if not record.entries:
            return self._write(
                "run update",
                lambda c: c.execute(UPDATE_RUN, params).rowcount == 1,
                None,
                single=True,
            )
        rows = _entry_rows(record.run_id, record.version, record.entries)
        return self._appending(
            "run update", lambda c: c.execute(UPDATE_RUN, params).rowcount == 1, rows
        )

    def _appending(
        self, what: str, move: Callable[[sa.Connection], bool], rows: list[dict[str, Any]]
    ) -> bool:
        """`move` the run's row, and when it moved insert `rows`, in one transaction.

        SQLite begins it IMMEDIATE, so the write lock is taken before the first statement.
        """
        try:
            with self._engine.connect() as connection:
                immediate = connection.execution_options(handrail_immediate=True)
                with immediate.begin():
                    if not move(connection):
                        return False
                    connection.execute(run_entries.insert(), rows)
                    return True
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{what} failed: {type(exc).__name__}") from exc

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run of an id: its row, then its entries up to the row's version."""

        def read(c: sa.Connection) -> RunRecord | None:
            row = c.execute(SELECT_RUN, {"k_run": run_id}).mappings().first()
            if row is None:
                return None
            record = run_of(row)
            params = {"k_run": run_id, "k_version": record.version}
            entries = tuple(str(text) for text in c.execute(_SELECT_ENTRIES, params).scalars())
            return dataclasses.replace(record, entries=entries) if entries else record

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

        def read(c: sa.Connection) -> list[RunRecord]:
            found = [run_of(r) for r in c.execute(query).mappings()]
            if not found:
                return found
            versions = {record.run_id: record.version for record in found}
            entries: dict[str, list[str]] = {}
            rows = c.execute(
                sa.select(_E.run_id, _E.version, _E.data)
                .where(_E.run_id.in_(list(versions)))
                .order_by(_E.run_id, _E.version, _E.n)
            )
            for run_id, version, text in rows:
                if version <= versions[run_id]:
                    entries.setdefault(run_id, []).append(str(text))
            return [
                dataclasses.replace(r, entries=tuple(entries[r.run_id]))
                if r.run_id in entries
                else r
                for r in found
            ]

        return self._read("runs read", read, None)
