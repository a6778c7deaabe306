"""Task records in `MemoryStore`: the same contract as `SqlTasks`, in one process.

An insert never overwrites, a change is a compare-and-set on the version, listings are
one tenant's newest first. Never decides a task's state.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime

from handrail.tasking import TaskRecord, TaskState

__all__ = ["MemoryTasks"]

_TIMES = ("created_at", "expires_at", "heartbeat_at", "started_at", "finished_at", "retry_at")


def _utc(record: TaskRecord) -> TaskRecord:
    changes: dict[str, datetime | None] = {}
    for name in _TIMES:
        value: datetime | None = getattr(record, name)
        changes[name] = None if value is None else value.astimezone(UTC)
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


class MemoryTasks:
    """The task methods of `MemoryStore` (a mixin over its lock)."""

    _lock: threading.Lock
    _tasks: dict[str, TaskRecord]

    def insert_task(self, record: TaskRecord) -> bool:
        """Store a new task unless its id exists."""
        if record.version != 1:
            msg = "a new task starts at version 1"
            raise ValueError(msg)
        with self._lock:
            if record.task_id in self._tasks:
                return False
            self._tasks[record.task_id] = _utc(record)
            return True

    def replace_task(self, record: TaskRecord, *, expect_version: int) -> bool:
        """Compare-and-set a task on its stored version."""
        if record.version != expect_version + 1:
            msg = "a replaced task's version is expect_version + 1"
            raise ValueError(msg)
        with self._lock:
            found = self._tasks.get(record.task_id)
            if found is None or found.version != expect_version:
                return False
            self._tasks[record.task_id] = _utc(record)
            return True

    def get_task(self, task_id: str) -> TaskRecord | None:
        """The task of an id."""
        with self._lock:
            return self._tasks.get(task_id)

    def latest_task(self, intent_key: str) -> TaskRecord | None:
        """The task of an intent key with the highest generation."""
        with self._lock:
            found = [t for t in self._tasks.values() if t.intent_key == intent_key]
        return max(found, key=lambda t: t.generation, default=None)

    def list_tasks(
        self,
        *,
        tenant_id: str,
        state: TaskState | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        """A tenant's tasks (or those in one state), newest first."""
        with self._lock:
            found = [
                t
                for t in self._tasks.values()
                if t.tenant_id == tenant_id and (state is None or t.state is state)
            ]
        found.sort(key=lambda t: (t.created_at, t.task_id), reverse=True)
        return found[: max(0, limit)]
