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

This module keeps the claim, duplicates, one attempt and its outcome's compare-and-set;
records' states are `_attempts`, answers and audit `_answers`, attempts held past their
caller `_held`, and LOCAL_WRITE's one transaction `_local`.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from handrail.clock import Clock
from handrail.deadline import DeadlineExceededError, within
from handrail.envelope import Envelope
from handrail.errors import ErrorCode, Refusal, StoreError, ToolSignal
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.fencing import Fence, FencedOffError, fenced
from handrail.plans import PlanState
from handrail.principal import Principal
from handrail.record.audit import Auditor
from handrail.retry import Sleep, retrying
from handrail.spec import SideEffect, ToolSpec
from handrail.store.base import Store
from handrail.writes import _answers as answers
from handrail.writes._attempts import Attempts
from handrail.writes._held import HeldAttempts
from handrail.writes._local import LocalWrites
from handrail.writes.outcome import WriteJob, WriteOutcome

if TYPE_CHECKING:
    from handrail.credentials import Secrets
    from handrail.store.sql import AsyncExecutions, SqlStore
    from handrail.telemetry import Telemetry
    from handrail.writes._telemetry import WriteTelemetry

__all__ = ["Executor", "WriteJob", "WriteOutcome"]

T = TypeVar("T")

_POLL_FIRST = 0.005
_POLL_MAX = 0.2


class Executor:
    """Runs keyed writes against a Store; safe to share between tasks and threads.

    Between calls it keeps only the attempts it holds past their caller (see `drain`).

    `worker_id` names this process's leases. `sleep` and `rng` are injected (polling
    and retry jitter) so tests neither wait nor guess. With `telemetry`, each execution
    is a `handrail.execute` span and the moves it makes are counted (`_telemetry`).
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
        telemetry: Telemetry | None = None,
    ) -> None:
        self._traced: WriteTelemetry | None = None
        if telemetry is not None:
            from handrail.writes._telemetry import WriteTelemetry  # noqa: PLC0415 - only with one

            self._traced = WriteTelemetry(telemetry, clock)
        # `secrets` gives a tool its context's secret access; `scrub` cleans stored
        # results of the secret values handed out, so records never hold them.
        self._store = store
        self._async = _async_executions(store)
        self._clock = clock
        self._worker = worker_id
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._attempts = Attempts(clock=clock, worker_id=worker_id, secrets=secrets, scrub=scrub)
        self._trail = answers.Trail(auditor, worker_id=worker_id)
        # Attempts whose thread outlived their caller, and their lease keepers.
        self._held = HeldAttempts(
            store=store,
            clock=clock,
            worker_id=worker_id,
            attempts=self._attempts,
            trail=self._trail,
            traced=self._traced,
        )
        self._local = LocalWrites(
            store=store,
            clock=clock,
            attempts=self._attempts,
            trail=self._trail,
            replay=self._existing,
            io=self._hop,
        )

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
        if self._traced is None:
            return await self._execute(job, deadline)
        return await self._traced.execute(job, lambda: self._execute(job, deadline))

    async def _execute(self, job: WriteJob, deadline: float) -> WriteOutcome:
        try:
            if job.tool.spec.side_effect is SideEffect.LOCAL_WRITE:
                return await self._local.execute(job, deadline)
            return await self._execute_external(job, deadline)
        except StoreError as exc:
            return self._store_failed(job, exc)

    async def _execute_external(self, job: WriteJob, deadline: float) -> WriteOutcome:
        # Claim first: the unique key settles duplicates, and for a plan the same
        # statement checks that it is still CONFIRMED. Only a lost claim reads.
        record = self._attempts.new_record(job, deadline)
        claimed = await self._insert(
            record,
            require_confirmed_plan=job.plan_id is not None,
            wait=deadline - self._clock.monotonic(),
        )
        if claimed:
            self._trail.note(job, "claim", "running", detail={"attempt": 1})
            return await self._run(job, record, deadline)
        existing = await self._io(self._store.get_execution, job.key)
        if existing is None:
            # No record and no claim: the plan is not CONFIRMED (any more).
            return self._withdrawn(job)
        return await self._existing(job, existing, deadline)

    def _store_failed(self, job: WriteJob, exc: StoreError) -> WriteOutcome:
        """The store failed before the tool was called by this request: nothing ran."""
        self._trail.note(
            job, "store", "failed", code=ErrorCode.TRANSIENT, detail={"note": str(exc)}
        )
        return answers.outcome(
            job,
            envelope=answers.error(
                job,
                ErrorCode.TRANSIENT,
                "The write could not be started (its records were unreachable); nothing was "
                "run by this call. Repeating it is safe: it takes effect at most once.",
                by_tool=False,
                retryable=True,
            ),
            record=None,
        )

    def _withdrawn(self, job: WriteJob) -> WriteOutcome:
        self._trail.note(job, "claim", "refused", code=ErrorCode.PLAN_CLOSED)
        return answers.outcome(
            job,
            envelope=answers.error(
                job,
                ErrorCode.PLAN_CLOSED,
                "The plan is not confirmed (or was withdrawn); nothing was run.",
                by_tool=False,
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
        if self._traced is None:
            return await self._replay(job, record, deadline)
        return await self._traced.execute(job, lambda: self._replay(job, record, deadline))

    async def _replay(
        self, job: WriteJob, record: ExecutionRecord, deadline: float
    ) -> WriteOutcome:
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
        if self._traced is None:
            return await self._run(job, record, deadline)
        return await self._traced.execute(job, lambda: self._run(job, record, deadline))

    async def drain(self, timeout: float) -> bool:
        """Wait until every attempt held past its caller has ended and its outcome is written.

        At most `timeout` seconds; False if some are still running then. For a clean
        shutdown, and for tests.
        """
        return await self._held.drain(timeout)

    # --- an existing record -----------------------------------------------------------------------

    async def _existing(
        self, job: WriteJob, record: ExecutionRecord, deadline: float
    ) -> WriteOutcome:
        wait = _POLL_FIRST
        while True:
            refusal = self._mismatch(job, record)
            if refusal is not None:
                return self._refused(job, refusal)
            if record.status.settled or record.status is ExecutionStatus.UNKNOWN:
                self._trail.note(job, "replay", record.status.value.lower(), code=record.error_code)
                return answers.outcome(
                    job, envelope=answers.from_record(job, record), record=record, replayed=True
                )
            if record.status is ExecutionStatus.PREPARED:
                if job.plan_id is not None and not await self._plan_confirmed(job.plan_id):
                    # Released, then withdrawn: the record stays as it is; nothing runs.
                    return self._withdrawn(job)
                claimed = self._attempts.claim(record, deadline, job.tool)
                # The re-claim also requires the plan to be CONFIRMED, in one statement.
                if await self._io(
                    self._store.replace_execution,
                    claimed,
                    expect_status=ExecutionStatus.PREPARED,
                    expect_version=record.version,
                    require_confirmed_plan=job.plan_id is not None,
                ):
                    self._trail.note(job, "claim", "running", detail={"attempt": claimed.attempts})
                    return await self._run(job, claimed, deadline)
            else:
                # RUNNING elsewhere: wait for its outcome within our own deadline.
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    self._trail.note(job, "duplicate", "in_progress", code=ErrorCode.IN_PROGRESS)
                    return answers.outcome(
                        job,
                        envelope=answers.error(
                            job,
                            ErrorCode.IN_PROGRESS,
                            "The same write is already running; its outcome is not known yet. "
                            "Do not repeat it; check again later.",
                            by_tool=False,
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

    def _refused(self, job: WriteJob, refusal: Refusal) -> WriteOutcome:
        self._trail.note(
            job, refusal.stage, "refused", code=refusal.code, detail={"note": refusal.detail}
        )
        return answers.outcome(
            job,
            envelope=answers.error(job, refusal.code, refusal.summary, by_tool=False),
            record=None,
        )

    # --- one attempt ------------------------------------------------------------------------------

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
            ctx = self._attempts.context(job, record, deadline, n)
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
                self._held.hold(job, record, fence, "cancelled while running")
                raise
            await asyncio.shield(self._settle_unknown(job, record, "cancelled while running"))
            raise
        except FencedOffError:
            return self._fenced_off(job)
        except (DeadlineExceededError, Exception) as exc:  # noqa: BLE001 - the tool boundary
            if fence.abandon():
                # A worker thread is still inside the tool: the attempt is not over.
                return self._held.hold(job, record, fence, answers.reason(exc))
            new, envelope, note = self._attempts.conclude(job, record, error=exc)
        else:
            new, envelope, note = self._attempts.conclude(job, record, result=result)
        return await self._write_outcome(job, record, new, envelope, note=note)

    async def _settle_unknown(
        self, job: WriteJob, record: ExecutionRecord, reason: str
    ) -> WriteOutcome:
        unknown = self._attempts.unknown(job, record)
        return await self._write_outcome(
            job, record, unknown, answers.from_record(job, unknown), note=reason
        )

    def _fenced_off(self, job: WriteJob) -> WriteOutcome:
        """The lease ran out before the tool was called: it was not, and nothing is written.

        The record is left as it is, for whoever holds it now (or the reconciler, once
        the lease has expired); this caller cannot know what they will do.
        """
        self._trail.note(
            job,
            "fenced",
            "not_started",
            code=ErrorCode.OUTCOME_UNKNOWN,
            detail={"note": "the lease ran out before the tool was called"},
        )
        return answers.outcome(job, envelope=answers.unknown(job), record=None)

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
            self._trail.note(
                job,
                "fenced",
                "refused",
                code=ErrorCode.OUTCOME_UNKNOWN,
                detail={"wanted": new.status.value, "note": note},
            )
            return answers.outcome(
                job,
                envelope=answers.unknown(job),
                record=None,
            )
        if self._traced is not None:
            self._traced.moved(current, new)
        self._trail.note(
            job,
            "outcome",
            new.status.value.lower(),
            code=new.error_code,
            detail={"attempt": new.attempts, "business_id": new.business_id, "note": note},
        )
        return answers.outcome(job, envelope=envelope, record=new)

    # --- the store, off the loop ------------------------------------------------------------------

    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _hop(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Awaitable[T]:  # noqa: ANN401
        # What the local path is given: `_io` looked up per call, so a replaced one applies.
        return self._io(fn, *args, **kwargs)

    async def _insert(
        self, record: ExecutionRecord, *, require_confirmed_plan: bool, wait: float
    ) -> bool:
        """Claim a key: on the loop where the store can, else in a worker thread.

        `wait` bounds how long the claim waits for a free connection (the caller's
        deadline); the store's own pool timeout bounds it in a worker thread.
        """
        if self._async is not None:
            from handrail.store.sql import execution_row  # noqa: PLC0415 - SQL stores only

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
            from handrail.store.sql import execution_params  # noqa: PLC0415 - SQL stores only

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


def _async_executions(store: Store) -> AsyncExecutions | None:
    """The store's claim path on the event loop, which only a `SqlStore` may have.

    A `SqlStore` exists only once `handrail.store.sql` is loaded, so looking there
    first keeps SQLAlchemy unloaded for a memory store (and for `import handrail`).
    """
    sql = sys.modules.get("handrail.store.sql")
    if sql is None or not isinstance(store, sql.SqlStore):
        return None
    return cast("SqlStore", store).async_executions
