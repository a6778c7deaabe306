"""TaskRecords: the one place a task's record moves, for every runner and every reader.

Implements the `TaskHost` side of the seam (runners report begin, checkpoints, progress,
retries and the end here) and the tenant-scoped reads and cancellation that the built-in
tools and the CLI use. Every change is a compare-and-set on the record's version, read
again and retried when another writer moved it first, so a heartbeat never loses a
cancellation. A task of another tenant, a missing one and a malformed id are the same
NOT_FOUND. Never runs a task body and never decides whether a task may be submitted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import unicodedata
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from handrail.canonical import canonical_json
from handrail.clock import Clock
from handrail.errors import AccessRefusedError, ErrorCode, StoreError
from handrail.principal import Principal
from handrail.record.raw_results import RawResults
from handrail.store.base import Store
from handrail.tasking import TaskRecord, TaskState, task_id_valid
from handrail.tasks._effects import TaskEffects
from handrail.tasks.runner import TaskCancelled, TaskExpired, TaskFailure, TaskSubmission

__all__ = ["TASK_MANAGE_PERMISSION", "TaskRecords", "clean_message"]

T = TypeVar("T")

TASK_MANAGE_PERMISSION = "handrail.tasks.manage"
"""Lets a principal cancel any task of its tenant, not only its own."""

_NOT_FOUND = "There is no task of that id."
_MAX_MESSAGE = 200
_MAX_ERROR = 1_000
_CAS_TRIES = 64
_DEFAULT_RESULT_CHARS = 4_000


def clean_message(message: str | None) -> str | None:
    """A progress message fit to store and show: printable, one line, at most 200 chars.

    Control, format (bidirectional overrides, zero-width) and other unprintable
    characters become spaces; runs of spaces collapse. Still untrusted text: whoever
    shows it marks it as the tool's words.
    """
    if message is None:
        return None
    text = "".join(_shown(ch) for ch in str(message))
    text = " ".join(text.split())[:_MAX_MESSAGE].strip()
    return text or None


def _shown(ch: str) -> str:
    return ch if ch.isprintable() and unicodedata.category(ch) != "Cf" else " "


class TaskRecords:
    """Task records over one Store: what runners report and what people and models read.

    `raw` keeps results longer than a tool's `TaskMode.max_result_chars` for people (the
    record then holds only its reference); without it a long result is stored whole.
    `effects` runs a task's external writes through the execution record (see
    `TaskScope.effect`); without it an effect is refused.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        raw: RawResults | None = None,
        effects: TaskEffects | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._raw = raw
        self._effects = effects
        self._result_chars: dict[str, int] = {}

    @property
    def store(self) -> Store:
        """The store the records live in."""
        return self._store

    def limit_results(self, tool: str, max_chars: int) -> None:
        """Results of `tool` longer than `max_chars` (as JSON) go to the raw store."""
        self._result_chars[tool] = max_chars

    # --- what the gate's submission and the people's side ask ---------------------------------

    async def create(
        self, submission: TaskSubmission, *, generation: int = 0
    ) -> tuple[TaskRecord, bool]:
        """Store a submission's QUEUED record; the existing one (and False) if the id is taken.

        `generation` is the submission's place among the tasks of its intent key.
        """
        principal = submission.caller()
        record = TaskRecord(
            task_id=submission.task_id,
            tenant_id=submission.tenant_id,
            user_id=principal.user_id,
            tool=submission.tool,
            intent_key=submission.intent_key,
            principal=submission.principal,
            arguments=canonical_json(dict(submission.arguments)).decode(),
            queue=submission.queue,
            state=TaskState.QUEUED,
            created_at=submission.submitted_at,
            expires_at=submission.expires_at,
            max_attempts=submission.max_attempts,
            estimate_seconds=submission.estimate_seconds,
            generation=generation,
        )
        if await self._io(self._store.insert_task, record):
            return record, True
        existing = await self._io(self._store.get_task, record.task_id)
        if existing is None:  # pragma: no cover - an insert lost to a row that vanished
            raise StoreError("a task insert lost to a record that cannot be read")
        return existing, False

    async def latest(self, intent_key: str) -> TaskRecord | None:
        """The newest generation's task of an intent key (no tenant check: the key has one)."""
        return await self._io(self._store.latest_task, intent_key)

    async def get(self, task_id: str, principal: Principal) -> TaskRecord:
        """A task of the principal's tenant; NOT_FOUND for any other, missing or malformed id.

        A task past its expiry that has not ended is recorded EXPIRED first: its worker
        stops at its next step boundary.
        """
        if not task_id_valid(task_id):
            raise AccessRefusedError(ErrorCode.NOT_FOUND, _NOT_FOUND)
        record = await self._io(self._store.get_task, task_id)
        if record is None or record.tenant_id != principal.tenant_id:
            raise AccessRefusedError(ErrorCode.NOT_FOUND, _NOT_FOUND)
        if not record.terminal and self._clock.now() >= record.expires_at:
            # Nobody may wait on a task past its expiry: say so now, not when a worker looks.
            await self.expired(task_id)
            return await self._io(self._store.get_task, task_id) or record
        return record

    async def result(self, task_id: str, principal: Principal) -> bytes:
        """A finished task's whole result as JSON bytes (see `TaskService.download`)."""
        record = await self.get(task_id, principal)
        if record.result_ref is not None and self._raw is not None:
            return (await self._raw.aread(record.result_ref, principal)).body
        if record.result is None:
            raise AccessRefusedError(ErrorCode.NOT_FOUND, "The task has no result.")
        return record.result.encode()

    async def list(
        self, principal: Principal, *, state: TaskState | None = None, limit: int = 100
    ) -> list[TaskRecord]:
        """The principal's tenant's tasks (or those in one state), newest first."""
        return await self._io(
            lambda: self._store.list_tasks(tenant_id=principal.tenant_id, state=state, limit=limit)
        )

    async def request_cancel(self, task_id: str, principal: Principal) -> TaskRecord:
        """Ask a task of the principal's tenant to stop; the record as it then is.

        A QUEUED task is CANCELLED at once (no runner will start it); a RUNNING one is
        marked and stops at its next step boundary. A finished task is CONFLICT and
        stays as it ended. Only the task's own user or a holder of
        `handrail.tasks.manage` may cancel (PERMISSION_DENIED); NOT_FOUND as `get`.
        """
        record = await self.get(task_id, principal)
        own = record.user_id == principal.user_id
        if not own and TASK_MANAGE_PERMISSION not in principal.permissions:
            raise AccessRefusedError(ErrorCode.PERMISSION_DENIED, "Only its owner may cancel it.")
        now = self._clock.now()
        ended: TaskRecord | None = None

        def cancel(found: TaskRecord) -> TaskRecord | None:
            nonlocal ended
            ended = found if found.terminal else None
            if found.terminal:
                return None
            if found.state is TaskState.QUEUED:
                return _moved(found, state=TaskState.CANCELLED, finished_at=now, lease_holder=None)
            return _moved(found, cancel_requested=True)

        changed = await self._update(task_id, cancel)
        if changed is not None:
            return changed
        if ended is not None and ended.state is TaskState.CANCELLED:
            return ended  # cancelling twice is one cancellation
        raise AccessRefusedError(ErrorCode.CONFLICT, "The task has already finished.")

    # --- the TaskHost side: what runners report ------------------------------------------------

    async def begin(self, task_id: str, *, attempt: int, worker: str) -> bool:
        """RUNNING under `worker`, unless the task ended, was cancelled or expired (False)."""
        now = self._clock.now()
        runs = False

        def start(found: TaskRecord) -> TaskRecord | None:
            nonlocal runs
            runs = False
            if found.terminal:
                return None
            if found.cancel_requested:
                return _moved(found, state=TaskState.CANCELLED, finished_at=now, lease_holder=None)
            if now >= found.expires_at:
                return _moved(found, state=TaskState.EXPIRED, finished_at=now, lease_holder=None)
            runs = True
            return _moved(
                found,
                state=TaskState.RUNNING,
                attempts=max(found.attempts, attempt),
                lease_holder=worker,
                heartbeat_at=now,
                started_at=found.started_at or now,
                retry_at=None,
            )

        await self._update(task_id, start)
        return runs

    async def checkpoint(self, task_id: str, *, worker: str) -> None:
        """Heartbeat; raises TaskCancelled / TaskExpired when the task must stop."""
        await self._beat(task_id, worker=worker)

    async def progress(
        self, task_id: str, fraction: float, message: str | None, *, worker: str
    ) -> None:
        """Store clamped progress and a cleaned message; a heartbeat and a stop check too."""
        value = 0.0 if math.isnan(fraction) else min(1.0, max(0.0, float(fraction)))
        await self._beat(task_id, worker=worker, progress=value, message=clean_message(message))

    async def heartbeat(self, task_id: str, *, worker: str) -> bool:
        """Renew `worker`'s lease on a RUNNING task; False when the lease is not its own."""
        now = self._clock.now()
        return (
            await self._update(
                task_id,
                lambda found: (
                    _moved(found, heartbeat_at=now)
                    if found.state is TaskState.RUNNING and found.lease_holder == worker
                    else None
                ),
            )
            is not None
        )

    async def take_over(self, task_id: str, *, worker: str, lease_seconds: float) -> str | None:
        """Move a RUNNING task's lease to `worker` once its holder's ran out; that holder."""
        now = self._clock.now()
        previous: str | None = None

        def claim(found: TaskRecord) -> TaskRecord | None:
            nonlocal previous
            previous = found.lease_holder
            beat = found.heartbeat_at or found.started_at or found.created_at
            stale = (now - beat).total_seconds() >= lease_seconds
            if found.state is not TaskState.RUNNING or previous in (None, worker) or not stale:
                return None
            return _moved(found, lease_holder=worker, heartbeat_at=now)

        if await self._update(task_id, claim) is None:
            return None
        return previous

    async def retrying(
        self, task_id: str, *, attempt: int, failure: TaskFailure, retry_at: datetime
    ) -> None:
        """QUEUED again until `retry_at`, with the failed attempt's code."""
        await self._update(
            task_id,
            lambda found: (
                None
                if found.terminal
                else _moved(
                    found,
                    state=TaskState.QUEUED,
                    attempts=max(found.attempts, attempt),
                    retry_at=retry_at,
                    lease_holder=None,
                    error_code=failure.code.value,
                    error_message=_error_text(failure),
                )
            ),
        )

    async def succeeded(self, task_id: str, result: Any) -> None:  # noqa: ANN401 - JSON
        """SUCCEEDED with the result, or with the raw store's reference of a long one."""
        found = await self._io(self._store.get_task, task_id)
        if found is None or found.terminal:
            return
        text = canonical_json(result).decode()
        ref: str | None = None
        limit = self._result_chars.get(found.tool, _DEFAULT_RESULT_CHARS)
        if len(text) > limit and self._raw is not None:
            ref = await self._raw.akeep(
                principal=Principal.from_snapshot(found.principal),
                tool=found.tool,
                call_id=task_id,
                body=text.encode(),
                media_type="application/json",
            )
        await self._finish(
            task_id,
            TaskState.SUCCEEDED,
            progress=1.0,
            result=None if ref else text,
            result_ref=ref,
            error_code=None,
            error_message=None,
        )

    async def failed(self, task_id: str, failure: TaskFailure) -> None:
        """FAILED with the failure's code (and a declared signal's text)."""
        await self._finish(
            task_id,
            TaskState.FAILED,
            error_code=failure.code.value,
            error_message=_error_text(failure),
        )

    async def cancelled(self, task_id: str) -> None:
        """CANCELLED, unless it already ended."""
        await self._finish(task_id, TaskState.CANCELLED)

    async def expired(self, task_id: str) -> None:
        """EXPIRED, unless it already ended."""
        await self._finish(task_id, TaskState.EXPIRED)

    async def effect(
        self, submission: TaskSubmission, name: str, fn: Callable[[], Awaitable[T]]
    ) -> T:
        """One external write of a task, exactly once under (task id, `name`)."""
        if self._effects is None:
            raise AccessRefusedError(
                ErrorCode.RISK_BLOCKED, "Task effects need TaskRecords(effects=...)."
            )
        return await self._effects.run(submission, name, fn)

    # --- helpers ------------------------------------------------------------------------------

    async def _beat(
        self,
        task_id: str,
        *,
        worker: str,
        progress: float | None = None,
        message: str | None = None,
    ) -> None:
        now = self._clock.now()
        stop: type[Exception] | None = None

        def beat(found: TaskRecord) -> TaskRecord | None:
            nonlocal stop
            stop = None
            if found.state is TaskState.EXPIRED or (not found.terminal and now >= found.expires_at):
                stop = TaskExpired
                return None
            if found.terminal or found.cancel_requested:
                stop = TaskCancelled
                return None
            changes: dict[str, Any] = {"heartbeat_at": now, "lease_holder": worker}
            if progress is not None:
                changes |= {"progress": progress, "progress_message": message}
            return _moved(found, **changes)

        if await self._update(task_id, beat) is None and stop is None:
            stop = TaskCancelled  # the record is gone: nothing may run on
        if stop is not None:
            raise stop

    async def _finish(self, task_id: str, state: TaskState, **changes: Any) -> None:  # noqa: ANN401
        now = self._clock.now()
        await self._update(
            task_id,
            lambda found: (
                None
                if found.terminal
                else _moved(found, state=state, finished_at=now, lease_holder=None, **changes)
            ),
        )

    async def _update(
        self, task_id: str, change: Callable[[TaskRecord], TaskRecord | None]
    ) -> TaskRecord | None:
        """Read, change and compare-and-set until it holds; the record as written.

        None when the task is missing or `change` declines (returns None).
        """
        for _ in range(_CAS_TRIES):
            found = await self._io(self._store.get_task, task_id)
            if found is None:
                return None
            moved = change(found)
            if moved is None:
                return None
            if await self._io(
                lambda m=moved, v=found.version: self._store.replace_task(m, expect_version=v)
            ):
                return moved
        raise StoreError(f"task {task_id} kept moving under {_CAS_TRIES} writes")

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:  # noqa: ANN401
        return await asyncio.to_thread(fn, *args)


def _moved(found: TaskRecord, **changes: Any) -> TaskRecord:  # noqa: ANN401
    return dataclasses.replace(found, version=found.version + 1, **changes)


def _error_text(failure: TaskFailure) -> str | None:
    return None if failure.message is None else failure.message[:_MAX_ERROR]


def result_value(record: TaskRecord) -> Any:  # noqa: ANN401 - JSON
    """The stored (short) result of a record, parsed; None when there is none."""
    return None if record.result is None else json.loads(record.result)
