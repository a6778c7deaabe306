"""Writes into the store's own database (LOCAL_WRITE): one transaction with their record.

Owns the local path: claim, effect and outcome commit together or not at all, so a
rollback is answered (and a declared failure recorded), never reconciled. Never runs
an external write and never leaves a record UNKNOWN.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from handrail.clock import Clock
from handrail.deadline import DeadlineExceededError, within
from handrail.errors import ConfigurationError, ErrorCode, StoreError, ToolSignal
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.plans import PlanState
from handrail.store.base import Store
from handrail.writes import _answers as answers
from handrail.writes._attempts import Attempts
from handrail.writes._hop import Hop
from handrail.writes.outcome import WriteJob, WriteOutcome

if TYPE_CHECKING:
    from handrail.store.sql import SqlStore

__all__ = ["LocalWrites", "Replay"]

T = TypeVar("T")

Replay = Callable[[WriteJob, ExecutionRecord, float], Awaitable[WriteOutcome]]
"""What an existing record of the job's key answers (the executor waits while it runs)."""


class _PlanClosedError(Exception):
    """The plan of a local write was withdrawn before its transaction took its lock."""


class _LocalRolledBack(Exception):  # noqa: N818 - carries the cause out of the transaction
    def __init__(self, error: BaseException) -> None:
        super().__init__(answers.failure_name(error))
        self.error = error


class LocalWrites:
    """Runs LOCAL_WRITE jobs in one transaction with their execution record.

    `replay` answers from a record the transaction found (or that committed despite
    an error); `io` hops the store calls outside the transaction off the event loop.
    """

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        attempts: Attempts,
        trail: answers.Trail,
        replay: Replay,
        io: Hop,
    ) -> None:
        self._store = store
        self._clock = clock
        self._attempts = attempts
        self._trail = trail
        self._replay = replay
        self._io = io

    async def execute(self, job: WriteJob, deadline: float) -> WriteOutcome:
        """Run `job` and its record in one transaction, or answer what its key became."""
        from handrail.store.sql import SqlStore  # noqa: PLC0415 - loads SQLAlchemy

        store = self._store
        if not isinstance(store, SqlStore):
            raise ConfigurationError(f"LOCAL_WRITE tool {job.tool.spec.name!r} needs a SQL store")
        try:
            record, existing = await asyncio.to_thread(self._transaction, store, job, deadline)
        except _LocalRolledBack as rolled:
            return await self._failure(job, rolled.error, deadline)
        except StoreError as exc:
            # The COMMIT may have reached the database before the error (a lost answer).
            # The record commits with the effect, so reading it back tells which.
            try:
                committed = await self._io(self._store.get_execution, job.key)
            except StoreError:
                committed, known = None, False
            else:
                known = True
            if committed is not None:
                self._trail.note(job, "outcome", "commit_confirmed", detail={"note": str(exc)})
                return await self._replay(job, committed, deadline)
            self._trail.note(
                job,
                "outcome",
                "rolled_back" if known else "commit_unconfirmed",
                code=ErrorCode.TRANSIENT,
                detail={"note": str(exc)},
            )
            return answers.outcome(
                job,
                envelope=answers.error(
                    job,
                    ErrorCode.TRANSIENT,
                    "The write was not committed (a database error); nothing changed. It "
                    "may be retried."
                    if known
                    else "A database error hid whether the write was committed. Repeating "
                    "it is safe: it takes effect at most once.",
                    by_tool=False,
                    retryable=True,
                ),
                record=None,
            )
        if existing is not None:
            return await self._replay(job, existing, deadline)
        self._trail.note(
            job,
            "outcome",
            "succeeded",
            detail={"attempt": 1, "business_id": record.business_id, "local": True},
        )
        return answers.outcome(job, envelope=answers.from_record(job, record), record=record)

    def _transaction(
        self,
        store: SqlStore,
        job: WriteJob,
        deadline: float,
    ) -> tuple[ExecutionRecord, ExecutionRecord | None]:
        """In a worker thread: claim, effect and outcome in one database transaction."""
        tool = job.tool
        with store.transaction() as connection:
            found = store.get_execution(job.key, connection=connection)
            if found is not None:
                return found, found
            if job.plan_id is not None and store.lock_plan(job.plan_id, connection) is not (
                PlanState.CONFIRMED
            ):
                # Locked until this transaction ends: a rejection waits, then finds it
                # executed; one that came first is seen here.
                raise _LocalRolledBack(_PlanClosedError())
            record = self._attempts.new_record(job, deadline)
            if not store.insert_execution(record, connection=connection):
                # A concurrent duplicate committed first (PostgreSQL waited for it on
                # the unique index); its record is the outcome.
                found = store.get_execution(job.key, connection=connection)
                if found is None:  # pragma: no cover - the winner's row is committed
                    raise StoreError("a conflicting execution record vanished")
                return found, found
            ctx = self._attempts.context(job, record, deadline, 1, transaction=connection)
            try:
                result = asyncio.run(
                    _bounded(
                        tool.invoke(tool.bind(dict(job.arguments)), ctx),
                        deadline - self._clock.monotonic(),
                    )
                )
            except (Exception, DeadlineExceededError) as exc:
                raise _LocalRolledBack(exc) from exc
            if self._clock.monotonic() >= deadline:
                # Committing now would report success to no one; roll back instead.
                raise _LocalRolledBack(DeadlineExceededError())
            stored, _ = self._attempts.stored(result)
            succeeded = record.moved(
                ExecutionStatus.SUCCEEDED,
                result=stored,
                business_id=tool.business_id_of(result),
                lease_owner=None,
                lease_expires_at=None,
                updated_at=self._clock.now(),
                retain_until=self._attempts.retain_until(tool),
            )
            if not store.replace_execution(
                succeeded,
                expect_status=record.status,
                expect_version=record.version,
                connection=connection,
            ):  # pragma: no cover - the row is locked by this transaction
                raise StoreError("own-database execution record changed inside its transaction")
            return succeeded, None

    async def _failure(self, job: WriteJob, error: BaseException, deadline: float) -> WriteOutcome:
        """The transaction rolled back: nothing happened. Declared failures are recorded."""
        if isinstance(error, _PlanClosedError):
            self._trail.note(job, "outcome", "rolled_back", code=ErrorCode.PLAN_CLOSED)
            return answers.outcome(
                job,
                envelope=answers.error(
                    job, ErrorCode.PLAN_CLOSED, answers.WITHDRAWN, by_tool=False
                ),
                record=None,
            )
        if isinstance(error, DeadlineExceededError):
            self._trail.note(job, "outcome", "rolled_back", code=ErrorCode.TIMEOUT)
            return answers.outcome(
                job,
                envelope=answers.error(
                    job,
                    ErrorCode.TIMEOUT,
                    "The write ran out of time and was rolled back; nothing changed. It may "
                    "be retried.",
                    by_tool=False,
                    retryable=True,
                ),
                record=None,
            )
        if isinstance(error, ToolSignal) and error.retryable:
            self._trail.note(job, "outcome", "rolled_back", code=error.code)
            return answers.outcome(
                job,
                envelope=answers.error(
                    job,
                    error.code,
                    error.message,
                    by_tool=True,
                    retryable=True,
                    retry_after=getattr(error, "retry_after", None),
                ),
                record=None,
            )
        code = error.code if isinstance(error, ToolSignal) else ErrorCode.FAILED_FINAL
        message = error.message if isinstance(error, ToolSignal) else answers.GENERIC_FAILURE
        record = self._attempts.new_record(job, deadline).moved(
            ExecutionStatus.FAILED_FINAL,
            error_code=code.value,
            lease_owner=None,
            lease_expires_at=None,
            result=json.dumps({"message": message}),
            retain_until=self._attempts.retain_until(job.tool),
        )
        if not await self._io(self._store.insert_execution, record):
            found = await self._io(self._store.get_execution, job.key)
            if found is not None:
                return await self._replay(job, found, deadline)
        self._trail.note(
            job,
            "outcome",
            "failed_final",
            code=code,
            detail={"note": answers.failure_name(error)},
        )
        envelope = answers.error(job, code, message, by_tool=isinstance(error, ToolSignal))
        return answers.outcome(job, envelope=envelope, record=record)


async def _bounded(work: Coroutine[Any, Any, T], remaining: float) -> T:
    # asyncio.run takes a coroutine; `within` gives an awaitable.
    return await within(work, remaining)
