"""Executor: runs one keyed write exactly once, and says UNKNOWN when it cannot know.

The record is claimed by an insert that the store's UNIQUE key settles; a duplicate
that loses finds the winner's record and returns its stored outcome, waits for a
RUNNING one within its own deadline, or answers IN_PROGRESS. It never calls the tool
a second time. Outcomes are written by compare-and-set under the attempt's lease, so
a worker whose lease ran out cannot overwrite what a reconciler decided.

External writes (SideEffect.EXTERNAL_WRITE) that time out, lose their response, are
cancelled or raise anything undeclared become UNKNOWN, never FAILED. Writes into the
store's own database (LOCAL_WRITE) run in one transaction with their record: both
commit or neither does, so they never need reconciling.

A sync tool runs in a worker thread that no deadline stops. When the deadline passes
(or the caller stops waiting) with that thread still inside the tool, the caller gets
OUTCOME_UNKNOWN but the attempt is not over: its record stays RUNNING under its lease,
which a LeaseKeeper renews until the thread ends, and then the call's own outcome is
written. Until then no reconciler re-runs it. Right before a tool is called (in the
worker thread, for a sync tool) the attempt's lease is checked: a worker whose lease
has run out never starts the effect.

What remains: a process that is already inside the call when it loses its lease (it
was frozen or cut off from the store past the lease, and a reconciler proved "not
found" and retried meanwhile) can still complete its effect after the retry. Only a
downstream system that deduplicates by `ctx.idempotency_key` is safe from that; one
that ignores the key cannot be protected by anything on this side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
import threading
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from handrail.canonical import canonical_json
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.deadline import DeadlineExceededError, within
from handrail.declare.definition import Tool
from handrail.envelope import Envelope, ErrorDetail, Status, jsonable
from handrail.errors import (
    ConfigurationError,
    ErrorCode,
    Refusal,
    StoreError,
    ToolRetryable,
    ToolSignal,
)
from handrail.events import AuditSubject
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.fencing import Fence, FencedOffError, ThreadOutcome, fenced
from handrail.plans import PlanState
from handrail.principal import Principal
from handrail.record.audit import Auditor
from handrail.retry import Sleep, retrying
from handrail.spec import SideEffect, ToolSpec
from handrail.store.base import Store
from handrail.store.sql import SqlStore, execution_params, execution_row
from handrail.writes.leases import LeaseKeeper
from handrail.writes.outcome import WriteJob, WriteOutcome

if TYPE_CHECKING:
    from handrail.credentials import Secrets

__all__ = ["Executor", "WriteJob", "WriteOutcome", "stored_result"]

T = TypeVar("T")

_log = logging.getLogger(__name__)
_GENERIC_FAILURE = "The tool failed with an internal error. It was recorded for the operators."
_POLL_FIRST = 0.005
_POLL_MAX = 0.2
_MIN_LEASE_S = 1.0
"""The shortest span a heartbeat renews a lease by, whatever the tool's lease grace."""


class Executor:
    """Runs keyed writes against a Store; safe to share between tasks and threads.

    Between calls it keeps only the attempts it holds past their caller (see `drain`).

    `worker_id` names this process's leases. `sleep` and `rng` are injected (polling
    and retry jitter) so tests neither wait nor guess.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        auditor: Auditor,
        worker_id: str,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        secrets: Callable[[Principal, ToolSpec], Secrets | None] | None = None,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        # `secrets` gives a tool its context's secret access; `scrub` cleans stored
        # results of the secret values handed out, so records never hold them.
        self._secrets = secrets
        self._scrub = scrub
        self._store = store
        self._async = store.async_executions if isinstance(store, SqlStore) else None
        self._clock = clock
        self._auditor = auditor
        self._worker = worker_id
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        # Attempts whose thread outlived their caller, and their lease keepers.
        self._held: set[LeaseKeeper] = set()
        self._held_changed = threading.Condition()

    @property
    def store(self) -> Store:
        """The store records live in."""
        return self._store

    @property
    def worker_id(self) -> str:
        """The lease owner name of this executor."""
        return self._worker

    # --- entry points -----------------------------------------------------------------------------

    async def execute(self, job: WriteJob, *, deadline: float) -> WriteOutcome:
        """Run `job` once under its key, or return what the key's execution became.

        `deadline` is on the clock's monotonic scale and covers waiting for a running
        duplicate as well as the tool itself.

        A failing store never escapes: once the tool was called, the outcome write
        turns it into OUTCOME_UNKNOWN; before that, nothing ran and the answer is a
        retryable TRANSIENT (repeating the request takes effect at most once).
        """
        try:
            if job.tool.spec.side_effect is SideEffect.LOCAL_WRITE:
                return await self._execute_local(job, deadline)
            return await self._execute_external(job, deadline)
        except StoreError as exc:
            return self._store_failed(job, exc)

    async def _execute_external(self, job: WriteJob, deadline: float) -> WriteOutcome:
        # Claim first: the unique key settles duplicates, and for a plan the same
        # statement checks that it is still CONFIRMED. Only a lost claim reads.
        record = self._new_record(job, deadline)
        claimed = await self._insert(
            record,
            require_confirmed_plan=job.plan_id is not None,
            wait=deadline - self._clock.monotonic(),
        )
        if claimed:
            self._audit(job, "claim", "running", detail={"attempt": 1})
            return await self._run(job, record, deadline)
        existing = await self._io(self._store.get_execution, job.key)
        if existing is None:
            # No record and no claim: the plan is not CONFIRMED (any more).
            return self._withdrawn(job)
        return await self._existing(job, existing, deadline)

    def _store_failed(self, job: WriteJob, exc: StoreError) -> WriteOutcome:
        """The store failed before the tool was called by this request: nothing ran."""
        self._audit(job, "store", "failed", code=ErrorCode.TRANSIENT, detail={"note": str(exc)})
        return _outcome(
            job,
            envelope=self._error(
                job,
                ErrorCode.TRANSIENT,
                "The write could not be started (its records were unreachable); nothing was "
                "run by this call. Repeating it is safe: it takes effect at most once.",
                retryable=True,
            ),
            record=None,
        )

    def _withdrawn(self, job: WriteJob) -> WriteOutcome:
        self._audit(job, "claim", "refused", code=ErrorCode.PLAN_CLOSED)
        return _outcome(
            job,
            envelope=self._error(
                job,
                ErrorCode.PLAN_CLOSED,
                "The plan is not confirmed (or was withdrawn); nothing was run.",
            ),
            record=None,
        )

    async def _plan_confirmed(self, plan_id: str) -> bool:
        plan = await self._io(self._store.get_plan, plan_id)
        return plan is not None and plan.state is PlanState.CONFIRMED

    async def replay(
        self,
        job: WriteJob,
        record: ExecutionRecord,
        *,
        deadline: float,
    ) -> WriteOutcome:
        """The outcome of an existing record of `job`'s key, waiting while it runs.

        Like `execute`, a failing store is a TRANSIENT outcome, never an exception.
        """
        try:
            return await self._existing(job, record, deadline)
        except StoreError as exc:
            return self._store_failed(job, exc)

    async def retry_record(
        self, job: WriteJob, record: ExecutionRecord, *, deadline: float
    ) -> WriteOutcome:
        """Run a record the reconciler proved was not executed, under the same key.

        `record` must be RUNNING and leased to this executor (the reconciler moved it).
        """
        return await self._run(job, record, deadline)

    # --- an existing record -----------------------------------------------------------------------

    async def _existing(
        self, job: WriteJob, record: ExecutionRecord, deadline: float
    ) -> WriteOutcome:
        wait = _POLL_FIRST
        while True:
            refusal = self._mismatch(job, record)
            if refusal is not None:
                return _outcome(job, envelope=self._refused(job, refusal), record=None)
            if record.status.settled or record.status is ExecutionStatus.UNKNOWN:
                self._audit(job, "replay", record.status.value.lower(), code=record.error_code)
                return _outcome(
                    job, envelope=self._from_record(job, record), record=record, replayed=True
                )
            if record.status is ExecutionStatus.PREPARED:
                if job.plan_id is not None and not await self._plan_confirmed(job.plan_id):
                    # Released, then withdrawn: the record stays as it is; nothing runs.
                    return self._withdrawn(job)
                claimed = self._claim(record, deadline, job.tool)
                # The re-claim also requires the plan to be CONFIRMED, in one statement.
                if await self._io(
                    self._store.replace_execution,
                    claimed,
                    expect_status=ExecutionStatus.PREPARED,
                    expect_version=record.version,
                    require_confirmed_plan=job.plan_id is not None,
                ):
                    self._audit(job, "claim", "running", detail={"attempt": claimed.attempts})
                    return await self._run(job, claimed, deadline)
            else:
                # RUNNING elsewhere: wait for its outcome within our own deadline.
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    self._audit(job, "duplicate", "in_progress", code=ErrorCode.IN_PROGRESS)
                    return _outcome(
                        job,
                        envelope=self._error(
                            job,
                            ErrorCode.IN_PROGRESS,
                            "The same write is already running; its outcome is not known yet. "
                            "Do not repeat it; check again later.",
                            retryable=True,
                        ),
                        record=record,
                    )
                await self._sleep(min(wait, remaining))
                wait = min(wait * 2, _POLL_MAX)
            fresh = await self._io(self._store.get_execution, job.key)
            if fresh is None:  # pragma: no cover - a row never disappears (purges keep tombstones)
                raise StoreError("an execution record vanished while waited on")
            record = fresh

    def _mismatch(self, job: WriteJob, record: ExecutionRecord) -> Refusal | None:
        if record.tenant_id != job.principal.tenant_id or record.tool != job.tool.spec.name:
            # A key is scoped to tenant and tool; anything else is a collision or an attack.
            return Refusal(
                ErrorCode.IDEMPOTENCY_MISMATCH,
                "This idempotency key belongs to another request; nothing was executed.",
                stage="execute",
                detail=f"key {job.key} is held by another tenant or tool",
            )
        if record.plan_hash != job.plan_hash:
            return Refusal(
                ErrorCode.IDEMPOTENCY_MISMATCH,
                "The same command was already used with different arguments; nothing was "
                "executed. Use a new command for a different request.",
                stage="execute",
                detail=f"key {job.key}: stored plan hash {record.plan_hash}, got {job.plan_hash}",
            )
        return None

    # --- one attempt ------------------------------------------------------------------------------

    def _lease_until(self, deadline: float, tool: Tool) -> datetime:
        span = max(0.0, deadline - self._clock.monotonic()) + tool.spec.reconcile.lease_grace
        return self._clock.now() + timedelta(seconds=span)

    def _new_record(self, job: WriteJob, deadline: float) -> ExecutionRecord:
        now = self._clock.now()
        return ExecutionRecord(
            idempotency_key=job.key,
            plan_id=job.plan_id,
            plan_hash=job.plan_hash,
            tool=job.tool.spec.name,
            tenant_id=job.principal.tenant_id,
            user_id=job.principal.user_id,
            principal=job.principal.snapshot(),
            arguments=canonical_json(dict(job.arguments)).decode(),
            expected_version=job.expected_version,
            status=ExecutionStatus.RUNNING,
            attempts=1,
            business_id=None,
            result=None,
            error_code=None,
            lease_owner=self._worker,
            lease_expires_at=self._lease_until(deadline, job.tool),
            next_check_at=None,
            checks=0,
            escalated=False,
            created_at=now,
            updated_at=now,
            retain_until=None,
            version=1,
        )

    def _claim(self, record: ExecutionRecord, deadline: float, tool: Tool) -> ExecutionRecord:
        return record.moved(
            ExecutionStatus.RUNNING,
            attempts=record.attempts + 1,
            lease_owner=self._worker,
            lease_expires_at=self._lease_until(deadline, tool),
            updated_at=self._clock.now(),
        )

    def _context(
        self,
        job: WriteJob,
        record: ExecutionRecord,
        deadline: float,
        attempt: int,
        transaction: sa.Connection | None = None,
    ) -> ToolContext:
        return ToolContext(
            principal=job.principal,
            call_id=job.call_id,
            tool=job.tool.spec.name,
            deadline=deadline,
            clock=self._clock,
            idempotency_key=job.key,
            expected_version=job.expected_version,
            transaction=transaction,
            attempt=record.attempts + attempt - 1,
            secrets=None if self._secrets is None else self._secrets(job.principal, job.tool.spec),
        )

    def _stored(self, result: object) -> tuple[str | None, str | None]:
        stored, note = stored_result(result)
        if stored is not None and self._scrub is not None:
            stored = self._scrub(stored)
        return stored, note

    async def _run(self, job: WriteJob, record: ExecutionRecord, deadline: float) -> WriteOutcome:
        tool = job.tool
        bound = tool.bind(dict(job.arguments))
        transient = tool.spec.retry.transient
        lease_until = record.lease_expires_at

        def may_start() -> bool:
            return lease_until is not None and self._clock.now() < lease_until

        # Sync tools pass this fence in their worker thread, right before the call.
        fence = Fence(may_start=may_start)

        async def attempt(n: int) -> object:
            # Right before the call: a worker whose lease ran out never starts the effect.
            if not may_start():
                raise FencedOffError
            ctx = self._context(job, record, deadline, n)
            return await within(tool.invoke(bound, ctx), deadline - self._clock.monotonic())

        def retryable(exc: BaseException) -> bool:
            if isinstance(exc, ToolSignal):
                return exc.retryable
            return tool.reconcile is not None and isinstance(exc, transient)

        try:
            with fenced(fence):
                result = await retrying(
                    attempt,
                    policy=tool.spec.retry,
                    retryable=retryable,
                    deadline=deadline,
                    clock=self._clock,
                    sleep=self._sleep,
                    rng=self._rng,
                )
        except asyncio.CancelledError:
            # The caller stopped waiting; the write may still land downstream.
            if fence.abandon():
                self._hold(job, record, fence, "cancelled while running")
                raise
            await asyncio.shield(self._settle_unknown(job, record, "cancelled while running"))
            raise
        except FencedOffError:
            return self._fenced_off(job)
        except (DeadlineExceededError, Exception) as exc:  # noqa: BLE001 - the tool boundary
            if fence.abandon():
                # A worker thread is still inside the tool: the attempt is not over.
                return self._hold(job, record, fence, _reason(exc))
            new, envelope, note = self._conclude(job, record, error=exc)
        else:
            new, envelope, note = self._conclude(job, record, result=result)
        return await self._write_outcome(job, record, new, envelope, note=note)

    def _conclude(
        self,
        job: WriteJob,
        record: ExecutionRecord,
        *,
        result: object = None,
        error: Exception | None = None,
        late: bool = False,
    ) -> tuple[ExecutionRecord, Envelope, str | None]:
        """What an attempt that ended with `result` or `error` makes of its RUNNING record.

        The new record, the envelope for the caller and a note for the audit trail.
        `late` marks a call that ended after its caller had stopped waiting.
        """
        tool = job.tool
        now = self._clock.now()
        if error is None:
            stored, note = self._stored(result)
            succeeded = record.moved(
                ExecutionStatus.SUCCEEDED,
                result=stored,
                business_id=tool.business_id_of(result),
                error_code=None,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=now,
                retain_until=self._retain_until(tool),
            )
            return succeeded, self._from_record(job, succeeded), note
        if isinstance(error, ToolRetryable):
            # Declared transient and not done: the record goes back to PREPARED so the
            # same key can run again later.
            released = record.moved(
                ExecutionStatus.PREPARED,
                lease_owner=None,
                lease_expires_at=None,
                error_code=error.code.value,
                updated_at=now,
            )
            envelope = self._error(
                job, error.code, error.message, retryable=True, retry_after=error.retry_after
            )
            return released, envelope, None
        if isinstance(error, ToolSignal):
            failed = record.moved(
                ExecutionStatus.FAILED_FINAL,
                error_code=error.code.value,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=now,
                retain_until=self._retain_until(tool),
                result=json.dumps({"message": error.message}),
            )
            return failed, self._error(job, error.code, error.message), None
        unknown = self._unknown(job, record, late=late)
        return unknown, self._from_record(job, unknown), _reason(error)

    def _unknown(
        self, job: WriteJob, record: ExecutionRecord, *, late: bool = False
    ) -> ExecutionRecord:
        policy = job.tool.spec.reconcile
        # After a late end, "not found" is proof only a grace after the call ended.
        wait = max(policy.first_check, policy.not_found_grace) if late else policy.first_check
        return record.moved(
            ExecutionStatus.UNKNOWN,
            error_code=ErrorCode.OUTCOME_UNKNOWN.value,
            lease_owner=None,
            lease_expires_at=None,
            next_check_at=self._clock.now() + timedelta(seconds=wait),
            updated_at=self._clock.now(),
        )

    async def _settle_unknown(
        self, job: WriteJob, record: ExecutionRecord, reason: str
    ) -> WriteOutcome:
        unknown = self._unknown(job, record)
        return await self._write_outcome(
            job, record, unknown, self._from_record(job, unknown), note=reason
        )

    def _fenced_off(self, job: WriteJob) -> WriteOutcome:
        """The lease ran out before the tool was called: it was not, and nothing is written.

        The record is left as it is, for whoever holds it now (or the reconciler, once
        the lease has expired); this caller cannot know what they will do.
        """
        self._audit(
            job,
            "fenced",
            "not_started",
            code=ErrorCode.OUTCOME_UNKNOWN,
            detail={"note": "the lease ran out before the tool was called"},
        )
        return _outcome(
            job, envelope=self._error(job, ErrorCode.OUTCOME_UNKNOWN, _UNKNOWN_TEXT), record=None
        )

    # --- attempts that outlive their caller -------------------------------------------------------

    def _hold(
        self, job: WriteJob, record: ExecutionRecord, fence: Fence, reason: str
    ) -> WriteOutcome:
        """Keep the lease of an attempt whose thread is still inside the tool.

        The record stays RUNNING under this worker's lease, renewed by a heartbeat until
        the thread ends; then the call's own outcome is written. The caller learns now
        that the outcome is unknown.
        """
        policy = job.tool.spec.reconcile
        keeper = LeaseKeeper(
            store=self._store,
            clock=self._clock,
            record=record,
            fence=fence,
            span=max(policy.lease_grace, _MIN_LEASE_S),
            finish=lambda current, outcome: self._finish_late(job, current, outcome),
            lost=lambda current: self._audit_late(
                job,
                "lease",
                "lost",
                code=ErrorCode.OUTCOME_UNKNOWN,
                detail={"version": current.version},
            ),
            ended=self._released,
        )
        with self._held_changed:
            self._held.add(keeper)
        keeper.start()
        self._audit(
            job, "abandoned", "held", code=ErrorCode.OUTCOME_UNKNOWN, detail={"note": reason}
        )
        return _outcome(
            job, envelope=self._error(job, ErrorCode.OUTCOME_UNKNOWN, _UNKNOWN_TEXT), record=record
        )

    def _released(self, keeper: LeaseKeeper) -> None:
        with self._held_changed:
            self._held.discard(keeper)
            self._held_changed.notify_all()

    def _finish_late(
        self, job: WriteJob, current: ExecutionRecord, outcome: ThreadOutcome | None
    ) -> None:
        """In the lease keeper's thread: write what the late call ended with, under its lease."""
        ended = outcome or ThreadOutcome(error=_NoOutcomeError())
        new, _, note = self._conclude(
            job, current, result=ended.result, error=ended.error, late=True
        )
        try:
            written = self._store.replace_execution(
                new,
                expect_status=current.status,
                expect_version=current.version,
                lease_owner=self._worker,
                lease_valid_at=self._clock.now(),
            )
        except StoreError as exc:
            written, note = False, f"{note or ''} outcome not recorded: {exc}".strip()
        self._audit_late(
            job,
            "late_outcome" if written else "fenced",
            new.status.value.lower() if written else "refused",
            code=new.error_code if written else ErrorCode.OUTCOME_UNKNOWN,
            detail={
                "attempt": new.attempts,
                "business_id": new.business_id,
                "wanted": new.status.value,
                "note": note,
            },
        )

    def _audit_late(
        self,
        job: WriteJob,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        """Audit from a lease keeper's thread, which may outlive the audit sink it was given."""
        try:
            self._audit(job, stage, decision, code=code, detail=detail)
        except StoreError:
            _log.exception("audit event %s/%s of key %s was lost", stage, decision, job.key)

    async def drain(self, timeout: float) -> bool:
        """Wait until every attempt held past its caller has ended and its outcome is written.

        At most `timeout` seconds; False if some are still running then. For a clean
        shutdown, and for tests.
        """

        def wait() -> bool:
            with self._held_changed:
                return self._held_changed.wait_for(lambda: not self._held, timeout)

        return await asyncio.to_thread(wait)

    async def _write_outcome(
        self,
        job: WriteJob,
        current: ExecutionRecord,
        new: ExecutionRecord,
        envelope: Envelope,
        *,
        note: str | None = None,
    ) -> WriteOutcome:
        """Compare-and-set the outcome under our lease; a lost lease means UNKNOWN."""
        try:
            written = await self._replace(
                new,
                expect_status=current.status,
                expect_version=current.version,
                lease_owner=self._worker,
                lease_valid_at=self._clock.now(),
            )
        except StoreError as exc:
            written = False
            note = f"{note or ''} outcome not recorded: {exc}".strip()
        if not written:
            self._audit(
                job,
                "fenced",
                "refused",
                code=ErrorCode.OUTCOME_UNKNOWN,
                detail={"wanted": new.status.value, "note": note},
            )
            return _outcome(
                job,
                envelope=self._error(
                    job,
                    ErrorCode.OUTCOME_UNKNOWN,
                    _UNKNOWN_TEXT,
                ),
                record=None,
            )
        self._audit(
            job,
            "outcome",
            new.status.value.lower(),
            code=new.error_code,
            detail={"attempt": new.attempts, "business_id": new.business_id, "note": note},
        )
        return _outcome(job, envelope=envelope, record=new)

    # --- writes into the store's own database -----------------------------------------------------

    async def _execute_local(self, job: WriteJob, deadline: float) -> WriteOutcome:
        store = self._store
        if not isinstance(store, SqlStore):
            raise ConfigurationError(f"LOCAL_WRITE tool {job.tool.spec.name!r} needs a SQL store")
        try:
            record, existing = await asyncio.to_thread(
                self._local_transaction, store, job, deadline
            )
        except _LocalRolledBack as rolled:
            return await self._local_failure(job, rolled.error, deadline)
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
                self._audit(job, "outcome", "commit_confirmed", detail={"note": str(exc)})
                return await self._existing(job, committed, deadline)
            self._audit(
                job,
                "outcome",
                "rolled_back" if known else "commit_unconfirmed",
                code=ErrorCode.TRANSIENT,
                detail={"note": str(exc)},
            )
            return _outcome(
                job,
                envelope=self._error(
                    job,
                    ErrorCode.TRANSIENT,
                    "The write was not committed (a database error); nothing changed. It "
                    "may be retried."
                    if known
                    else "A database error hid whether the write was committed. Repeating "
                    "it is safe: it takes effect at most once.",
                    retryable=True,
                ),
                record=None,
            )
        if existing is not None:
            return await self._existing(job, existing, deadline)
        self._audit(
            job,
            "outcome",
            "succeeded",
            detail={"attempt": 1, "business_id": record.business_id, "local": True},
        )
        return _outcome(job, envelope=self._from_record(job, record), record=record)

    def _local_transaction(
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
            record = self._new_record(job, deadline)
            if not store.insert_execution(record, connection=connection):
                # A concurrent duplicate committed first (PostgreSQL waited for it on
                # the unique index); its record is the outcome.
                found = store.get_execution(job.key, connection=connection)
                if found is None:  # pragma: no cover - the winner's row is committed
                    raise StoreError("a conflicting execution record vanished")
                return found, found
            ctx = self._context(job, record, deadline, 1, transaction=connection)
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
            stored, _ = self._stored(result)
            succeeded = record.moved(
                ExecutionStatus.SUCCEEDED,
                result=stored,
                business_id=tool.business_id_of(result),
                lease_owner=None,
                lease_expires_at=None,
                updated_at=self._clock.now(),
                retain_until=self._retain_until(tool),
            )
            if not store.replace_execution(
                succeeded,
                expect_status=record.status,
                expect_version=record.version,
                connection=connection,
            ):  # pragma: no cover - the row is locked by this transaction
                raise StoreError("own-database execution record changed inside its transaction")
            return succeeded, None

    async def _local_failure(
        self, job: WriteJob, error: BaseException, deadline: float
    ) -> WriteOutcome:
        """The transaction rolled back: nothing happened. Declared failures are recorded."""
        if isinstance(error, _PlanClosedError):
            self._audit(job, "outcome", "rolled_back", code=ErrorCode.PLAN_CLOSED)
            return _outcome(
                job,
                envelope=self._error(
                    job, ErrorCode.PLAN_CLOSED, "The plan was withdrawn; nothing was run."
                ),
                record=None,
            )
        if isinstance(error, DeadlineExceededError):
            self._audit(job, "outcome", "rolled_back", code=ErrorCode.TIMEOUT)
            return _outcome(
                job,
                envelope=self._error(
                    job,
                    ErrorCode.TIMEOUT,
                    "The write ran out of time and was rolled back; nothing changed. It may "
                    "be retried.",
                    retryable=True,
                ),
                record=None,
            )
        if isinstance(error, ToolSignal) and error.retryable:
            self._audit(job, "outcome", "rolled_back", code=error.code)
            return _outcome(
                job,
                envelope=self._error(
                    job,
                    error.code,
                    error.message,
                    retryable=True,
                    retry_after=getattr(error, "retry_after", None),
                ),
                record=None,
            )
        code = error.code if isinstance(error, ToolSignal) else ErrorCode.FAILED_FINAL
        message = error.message if isinstance(error, ToolSignal) else _GENERIC_FAILURE
        record = self._new_record(job, deadline).moved(
            ExecutionStatus.FAILED_FINAL,
            error_code=code.value,
            lease_owner=None,
            lease_expires_at=None,
            result=json.dumps({"message": message}),
            retain_until=self._retain_until(job.tool),
        )
        if not await self._io(self._store.insert_execution, record):
            found = await self._io(self._store.get_execution, job.key)
            if found is not None:
                return await self._existing(job, found, deadline)
        self._audit(job, "outcome", "failed_final", code=code, detail={"note": _name(error)})
        return _outcome(job, envelope=self._error(job, code, message), record=record)

    # --- envelopes and audit ----------------------------------------------------------------------

    def _retain_until(self, tool: Tool) -> datetime:
        return self._clock.now() + timedelta(seconds=tool.spec.idempotency.retention_seconds)

    def _from_record(self, job: WriteJob, record: ExecutionRecord) -> Envelope:
        if record.purged:
            return self._from_tombstone(job, record)
        if record.status is ExecutionStatus.SUCCEEDED:
            # The stored result as it is; whoever hands it to a model shapes it first.
            return Envelope(
                call_id=job.call_id,
                tool=job.tool.spec.name,
                status=Status.OK,
                summary=f"{job.tool.spec.name} succeeded.",
                data=record.result_value,
                schema_version=job.tool.spec.schema_version,
            )
        if record.status is ExecutionStatus.FAILED_FINAL:
            code = ErrorCode(record.error_code or ErrorCode.FAILED_FINAL.value)
            stored = record.result_value
            message = stored.get("message") if isinstance(stored, dict) else None
            return self._error(job, code, str(message or _GENERIC_FAILURE))
        return self._error(job, ErrorCode.OUTCOME_UNKNOWN, _UNKNOWN_TEXT)

    def _from_tombstone(self, job: WriteJob, record: ExecutionRecord) -> Envelope:
        """A repeat of a write whose record was purged: it ran; it never runs again."""
        if record.status is ExecutionStatus.SUCCEEDED:
            envelope = self._error(
                job,
                ErrorCode.ALREADY_EXECUTED,
                "This write already ran and succeeded; its result is no longer kept. It was "
                "not run again. Do not repeat it.",
            )
            # The business id came from downstream: data (marked untrusted), never summary.
            data = {"business_id": record.business_id} if record.business_id else None
            return dataclasses.replace(envelope, data=data)
        return self._error(
            job,
            ErrorCode(record.error_code or ErrorCode.FAILED_FINAL.value),
            "This write already ran and failed for good; its details are no longer kept. "
            "It was not run again.",
        )

    def _error(
        self,
        job: WriteJob,
        code: ErrorCode,
        summary: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> Envelope:
        return Envelope(
            call_id=job.call_id,
            tool=job.tool.spec.name,
            status=Status.ERROR,
            summary=summary,
            schema_version=job.tool.spec.schema_version,
            error=ErrorDetail(code=code, retryable=retryable, retry_after=retry_after),
        )

    def _refused(self, job: WriteJob, refusal: Refusal) -> Envelope:
        self._audit(
            job, refusal.stage, "refused", code=refusal.code, detail={"note": refusal.detail}
        )
        return self._error(job, refusal.code, refusal.summary)

    def _audit(
        self,
        job: WriteJob,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        if not self._auditor.enabled:
            return
        principal = job.principal
        self._auditor.note(
            kind="write",
            stage=stage,
            decision=decision,
            code=code,
            subject=AuditSubject(
                request_id=principal.request_id,
                tool_call_id=job.call_id[:256],
                tool=job.tool.spec.name,
                schema_version=job.tool.spec.schema_version,
                args_hash=job.plan_hash,
                user_id=principal.user_id,
                tenant_id=principal.tenant_id,
            ),
            facts={
                "key": job.key,
                "plan_id": job.plan_id,
                "worker": self._worker,
                **(detail or {}),
            },
        )

    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _insert(
        self, record: ExecutionRecord, *, require_confirmed_plan: bool, wait: float
    ) -> bool:
        """Claim a key: on the loop where the store can, else in a worker thread.

        `wait` bounds how long the claim waits for a free connection (the caller's
        deadline); the store's own pool timeout bounds it in a worker thread.
        """
        if self._async is not None:
            return await self._async.insert(
                execution_row(record) | {"k_plan": record.plan_id},
                require_confirmed_plan=require_confirmed_plan,
                wait=wait,
            )
        return await self._io(
            self._store.insert_execution,
            record,
            require_confirmed_plan=require_confirmed_plan,
        )

    async def _replace(
        self,
        record: ExecutionRecord,
        *,
        expect_status: ExecutionStatus,
        expect_version: int,
        lease_owner: str | None = None,
        lease_valid_at: datetime | None = None,
    ) -> bool:
        """Compare-and-set a record: on the loop where the store can, else in a thread."""
        if self._async is not None:
            params = execution_params(
                record,
                expect_status=expect_status,
                expect_version=expect_version,
                lease_owner=lease_owner,
                lease_valid_at=lease_valid_at,
            )
            return await self._async.replace(
                params,
                owner=lease_owner is not None,
                valid=lease_valid_at is not None,
            )
        return await self._io(
            self._store.replace_execution,
            record,
            expect_status=expect_status,
            expect_version=expect_version,
            lease_owner=lease_owner,
            lease_valid_at=lease_valid_at,
        )


_UNKNOWN_TEXT = (
    "The write's outcome is not known yet (it may or may not have happened). It is being "
    "reconciled with the downstream system under the same key. Do not repeat it and do "
    "not tell the user it failed or succeeded."
)


class _NoOutcomeError(Exception):
    """The late call's outcome is not known (several of its threads ran at once)."""


def _reason(exc: BaseException) -> str:
    return "deadline passed" if isinstance(exc, DeadlineExceededError) else _name(exc)


class _PlanClosedError(Exception):
    """The plan of a local write was withdrawn before its transaction took its lock."""


class _LocalRolledBack(Exception):  # noqa: N818 - carries the cause out of the transaction
    def __init__(self, error: BaseException) -> None:
        super().__init__(_name(error))
        self.error = error


async def _bounded(work: Coroutine[Any, Any, T], remaining: float) -> T:
    # asyncio.run takes a coroutine; `within` gives an awaitable.
    return await within(work, remaining)


def stored_result(result: object) -> tuple[str | None, str | None]:
    """Compact JSON text of a result, or None and why when it cannot be stored."""
    try:
        _, encoded = jsonable(result)
        return encoded.decode(), None
    except ValueError as exc:
        # The effect happened; an unstorable result must not turn it into a failure.
        return None, f"result not stored: {exc}"[:200]


def _outcome(
    job: WriteJob,
    *,
    envelope: Envelope,
    record: ExecutionRecord | None,
    replayed: bool = False,
) -> WriteOutcome:
    return WriteOutcome(
        envelope=envelope,
        record=record,
        key=job.key,
        plan_id=job.plan_id,
        replayed=replayed,
    )


def _name(exc: BaseException) -> str:
    return type(exc).__name__
