"""Task records in the SQL stores: one row per task.

`SqlTasks` is the part of `SqlStore` that keeps tasks: an insert that loses to an
existing id writes nothing (the same intent is one task), every later change is a
compare-and-set on the row's version, and listings are one tenant's. Never decides a
task's state: that is `handrail.tasks.records`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa

from handrail.store._rows import aware, maybe_aware, utc
from handrail.store._sql_part import SqlPart
from handrail.store._tables import tasks
from handrail.tasking import TaskRecord, TaskState

__all__ = ["SqlTasks"]

_T = tasks.c
_FIELDS = tuple(f.name for f in dataclasses.fields(TaskRecord))
_TIMES = frozenset(
    {"created_at", "expires_at", "heartbeat_at", "started_at", "finished_at", "retry_at"}
)

_REPLACE = (
    tasks.update()
    .where(_T.task_id == sa.bindparam("k_id"), _T.version == sa.bindparam("k_version"))
    .values({name: sa.bindparam(f"v_{name}", type_=_T[name].type) for name in _FIELDS})
)


def _row(record: TaskRecord) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(record, name)
        row[name] = utc(value) if name in _TIMES else value
    row["state"] = record.state.value
    return row


def _record(row: sa.RowMapping) -> TaskRecord:
    values = {name: row[name] for name in _FIELDS}
    for name in _TIMES:
        values[name] = maybe_aware(values[name])
    values["created_at"] = aware(row["created_at"])
    values["expires_at"] = aware(row["expires_at"])
    values["state"] = TaskState(row["state"])
    values["cancel_requested"] = bool(row["cancel_requested"])
    return TaskRecord(**values)


class SqlTasks(SqlPart):
    """The task methods of `SqlStore` (a mixin over its engine and helpers)."""

    def insert_task(self, record: TaskRecord) -> bool:
        """Insert unless the id exists: INSERT ... ON CONFLICT DO NOTHING."""
        if record.version != 1:
            msg = "a new task starts at version 1"
            raise ValueError(msg)
        row = _row(record)
        return self._write(
            "task insert",
            lambda c: c.execute(self._sql.insert_task, row).rowcount == 1,
            None,
            single=True,
        )

    def replace_task(self, record: TaskRecord, *, expect_version: int) -> bool:
        """Compare-and-set: one UPDATE ... WHERE task id and version."""
        if record.version != expect_version + 1:
            msg = "a replaced task's version is expect_version + 1"
            raise ValueError(msg)
        params = {f"v_{name}": value for name, value in _row(record).items()}
        params |= {"k_id": record.task_id, "k_version": expect_version}
        return self._write(
            "task replace",
            lambda c: c.execute(_REPLACE, params).rowcount == 1,
            None,
            single=True,
        )

    def get_task(self, task_id: str) -> TaskRecord | None:
        """The task of an id (any tenant's: the caller scopes it)."""
        query = sa.select(tasks).where(_T.task_id == task_id)

        def read(c: sa.Connection) -> TaskRecord | None:
            row = c.execute(query).mappings().first()
            return None if row is None else _record(row)

        return self._read("task read", read, None)

    def latest_task(self, intent_key: str) -> TaskRecord | None:
        """The task of an intent key with the highest generation (one indexed row)."""
        query = (
            sa.select(tasks)
            .where(_T.intent_key == intent_key)
            .order_by(_T.generation.desc())
            .limit(1)
        )

        def read(c: sa.Connection) -> TaskRecord | None:
            row = c.execute(query).mappings().first()
            return None if row is None else _record(row)

        return self._read("task read", read, None)

    def list_tasks(
        self,
        *,
        tenant_id: str,
        state: TaskState | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        """A tenant's tasks (or those in one state), newest first."""
        query = (
            sa.select(tasks)
            .where(_T.tenant_id == tenant_id)
            .order_by(_T.created_at.desc(), _T.task_id.desc())
            .limit(max(0, limit))
        )
        if state is not None:
            query = query.where(_T.state == state.value)
        return self._read(
            "tasks read",
            lambda c: [_record(r) for r in c.execute(query).mappings()],
            None,
        )
