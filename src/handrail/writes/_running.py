"""Running decided writes once: a confirmed plan or a host's command, to one outcome.

Owns the execution path after the decisions: the plan's job and deadline, the checks
right before the claim (runnable, version unmoved), replays, and shaping the outcome.
Executing returns: every refusal comes back as a WriteOutcome; never decides a plan.
"""

from __future__ import annotations

import dataclasses

from handrail.canonical import canonical_json
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.credentials import SecretLedger
from handrail.deadline import DeadlineExceededError, within
from handrail.declare.definition import BoundArguments, Tool
from handrail.declare.registry import Registry
from handrail.envelope import HANDRAIL_SOURCE, Envelope, ErrorDetail, Status, Trust
from handrail.errors import ErrorCode, StoreError, ToolSignal, WriteRefusedError
from handrail.execution import ExecutionRecord, ExecutionStatus, command_key, intent_hash, plan_key
from handrail.plans import Plan, PlanRecord, PlanState
from handrail.principal import Principal
from handrail.shaping.shaper import Shaper
from handrail.store.base import Store
from handrail.writes._decisions import Decisions, call_hook
from handrail.writes._hop import Hop
from handrail.writes.executor import Executor
from handrail.writes.outcome import WriteJob, WriteOutcome

__all__ = ["Runner"]

_UNREACHABLE = (
    "The plan's records could not be reached; nothing was run by this call. Repeating "
    "it is safe: it takes effect at most once."
)
_RETRYABLE = frozenset({ErrorCode.TRANSIENT, ErrorCode.TIMEOUT})


def _unreachable() -> WriteRefusedError:
    return WriteRefusedError(ErrorCode.TRANSIENT, _UNREACHABLE)


class _ToolRefusedError(WriteRefusedError):
    """A refusal in the words of the tool's own hook (a signal it raised): untrusted."""


def _refused(refused: WriteRefusedError, *, call_id: str, plan: Plan | None) -> WriteOutcome:
    """The outcome of an execution refused before its key was claimed: nothing ran.

    Labelled by who wrote the message: Handrail, or the tool's hook.
    """
    code = refused.code
    by_tool = isinstance(refused, _ToolRefusedError)
    envelope = Envelope(
        call_id=call_id,
        tool=plan.tool if plan is not None else "",
        status=Status.ERROR,
        summary=refused.message,
        schema_version=plan.schema_version if plan is not None else None,
        error=ErrorDetail(code=code, retryable=code in _RETRYABLE),
        trust=Trust.UNTRUSTED if by_tool else Trust.HANDRAIL,
        source=None if by_tool else HANDRAIL_SOURCE,
    )
    # No key: nothing was attempted under one (`record_for` finds it, once it runs).
    return WriteOutcome(
        envelope=envelope, record=None, key=None, plan_id=None if plan is None else plan.plan_id
    )


class Runner:
    """Runs plans and commands under their keys with one executor (see `Writes`)."""

    def __init__(
        self,
        *,
        registry: Registry,
        store: Store,
        clock: Clock,
        decisions: Decisions,
        executor: Executor,
        shaper: Shaper,
        ledger: SecretLedger,
        io: Hop,
    ) -> None:
        self._registry = registry
        self._store = store
        self._clock = clock
        self._decisions = decisions
        self._executor = executor
        self._shaper = shaper
        self._ledger = ledger
        self._io = io

    # --- executing ----------------------------------------------------------------------------

    async def execute_plan(
        self,
        plan_id: str,
        principal: Principal,
        *,
        timeout: float | None = None,
        call_id: str | None = None,
    ) -> WriteOutcome:
        """Run a confirmed plan once under its key; later calls return the same outcome.

        The contract is `Writes.execute_plan`'s.
        """
        started = self._clock.monotonic()
        answer_to = call_id or plan_id
        try:
            plan, record = await self._plan_to_run(plan_id, principal)
        except WriteRefusedError as refused:
            return _refused(refused, call_id=answer_to, plan=None)
        except StoreError:
            return _refused(_unreachable(), call_id=answer_to, plan=None)
        try:
            return await self._run_plan(
                plan,
                record,
                principal,
                started=started,
                timeout=timeout,
                call_id=answer_to,
            )
        except WriteRefusedError as refused:
            return _refused(refused, call_id=answer_to, plan=plan)
        except StoreError as exc:
            self._decisions.note(
                plan,
                principal,
                "execute",
                "failed",
                code=ErrorCode.TRANSIENT,
                detail={"note": str(exc)},
            )
            return _refused(_unreachable(), call_id=answer_to, plan=plan)

    async def _plan_to_run(
        self, plan_id: str, principal: Principal
    ) -> tuple[Plan, PlanRecord | None]:
        """The plan's content, and its stored record unless the content came from memory."""
        # Plans never change, so their content may come from memory; their state never
        # does: the claim checks CONFIRMED in the database, in the same statement.
        plan = self._decisions.known(plan_id)
        if plan is None or plan.tenant_id != principal.tenant_id or self._decisions.expired(plan):
            record = await self._decisions.get_plan(plan_id, principal)
            return record.plan, record
        return plan, None

    async def _run_plan(
        self,
        plan: Plan,
        record: PlanRecord | None,
        principal: Principal,
        *,
        started: float,
        timeout: float | None,
        call_id: str,
    ) -> WriteOutcome:
        """`execute_plan` once the plan is known; refusals raise WriteRefusedError."""
        if principal.user_id != plan.user_id:
            raise self._decisions.refuse(
                plan,
                principal,
                ErrorCode.PERMISSION_DENIED,
                "Only the person who asked can execute this plan.",
            )
        tool = self._registry.lookup(plan.tool, principal)
        if tool is None:
            earlier = await self._ran_before_retirement(
                plan, principal, started=started, timeout=timeout, call_id=call_id
            )
            if earlier is not None:
                return earlier
            raise self._decisions.refuse(
                plan, principal, ErrorCode.UNKNOWN_TOOL, "The plan's tool is no longer available."
            )
        deadline = started + _budget(tool, timeout)
        key = plan_key(tenant_id=plan.tenant_id, tool=plan.tool, plan_id=plan.plan_id)
        job = _plan_job(plan, tool, principal, key, call_id)
        if record is None:
            self._decisions.check_content(plan, tool, principal)
        else:
            replayed = await self._not_runnable(record, job, tool, principal, deadline)
            if replayed is not None:
                return await self._shaped(replayed, principal)
        if tool.resolve_version is not None:
            moved = await self._version_moved(plan, tool, job, deadline)
            if moved:
                existing = await self._io(self._store.get_execution, key)
                if existing is not None and existing.status is not ExecutionStatus.PREPARED:
                    # It ran already: the target moved on by it (or after it); replay.
                    replayed = await self._executor.replay(job, existing, deadline=deadline)
                    return await self._shaped(replayed, principal)
                await self._decisions.reject(plan.plan_id, principal)
                raise self._decisions.refuse(
                    plan,
                    principal,
                    ErrorCode.VERSION_CONFLICT,
                    "The target changed after the plan was confirmed; nothing was written. "
                    "Re-read it and propose a new plan.",
                )
        outcome = await self._executor.execute(job, deadline=deadline)
        if record is None and outcome.record is None and outcome.error_is(ErrorCode.PLAN_CLOSED):
            # The optimistic claim found the plan not CONFIRMED: answer precisely.
            fresh = await self._decisions.get_plan(plan.plan_id, principal)
            replayed = await self._not_runnable(fresh, job, tool, principal, deadline)
            if replayed is not None:  # pragma: no cover - a record appeared meanwhile
                return await self._shaped(replayed, principal)
        return await self._shaped(outcome, principal)

    async def _version_moved(self, plan: Plan, tool: Tool, job: WriteJob, deadline: float) -> bool:
        """Whether the target's version differs from the plan's, asked within the deadline.

        A check that cannot answer refuses the run (nothing was written): TIMEOUT when
        the deadline passed, the code of a declared signal, TRANSIENT for a declared
        transient exception, FAILED_FINAL for anything else.
        """
        hook = tool.resolve_version
        if hook is None:  # pragma: no cover - the caller checked
            return False
        ctx = ToolContext(
            principal=job.principal,
            call_id=job.call_id,
            tool=tool.spec.name,
            deadline=deadline,
            clock=self._clock,
            idempotency_key=job.key,
            expected_version=plan.expected_version,
        )
        arguments = tool.bind(plan.argument_values).value
        try:
            current = await within(
                call_hook(hook, arguments, ctx), deadline - self._clock.monotonic()
            )
        except DeadlineExceededError:
            raise self._decisions.refuse(
                plan,
                job.principal,
                ErrorCode.TIMEOUT,
                "The target's version could not be checked in time; nothing was written. "
                "It may be retried.",
            ) from None
        except ToolSignal as signal:
            self._decisions.note(plan, job.principal, "confirm", "refused", code=signal.code)
            raise _ToolRefusedError(signal.code, signal.message) from None
        except Exception as exc:  # noqa: BLE001 - the hook's boundary: anything undeclared
            transient = isinstance(exc, tool.spec.retry.transient)
            raise self._decisions.refuse(
                plan,
                job.principal,
                ErrorCode.TRANSIENT if transient else ErrorCode.FAILED_FINAL,
                "The target's version could not be checked; nothing was written.",
            ) from None
        return (None if current is None else str(current)) != plan.expected_version

    async def _ran_before_retirement(
        self,
        plan: Plan,
        principal: Principal,
        *,
        started: float,
        timeout: float | None,
        call_id: str,
    ) -> WriteOutcome | None:
        """The recorded outcome of a plan whose tool ran before its deprecation day.

        A tool past its day never runs again, but what it did before still answers a
        retry of the same plan (replayed, never re-run), instead of UNKNOWN_TOOL that
        would tell the model nothing was done. None when there is no such outcome: no
        record, one never started (PREPARED), or a tool refused for any other reason.
        """
        tool = self._registry.retired_tool(plan.tool, principal)
        if tool is None:
            return None
        key = plan_key(tenant_id=plan.tenant_id, tool=plan.tool, plan_id=plan.plan_id)
        existing = await self._io(self._store.get_execution, key)
        if existing is None or existing.status is ExecutionStatus.PREPARED:
            return None
        job = _plan_job(plan, tool, principal, key, call_id)
        deadline = started + _budget(tool, timeout)
        replayed = await self._executor.replay(job, existing, deadline=deadline)
        return await self._shaped(replayed, principal)

    async def _not_runnable(
        self,
        record: PlanRecord,
        job: WriteJob,
        tool: Tool,
        principal: Principal,
        deadline: float,
    ) -> WriteOutcome | None:
        """None if the plan may run now; an earlier outcome of it; or a refusal raised."""
        if record.state is not PlanState.CONFIRMED or self._decisions.expired(record.plan):
            # Not runnable now; but a stored or running outcome of it still answers.
            existing = await self._io(self._store.get_execution, job.key)
            if existing is not None and existing.status is not ExecutionStatus.PREPARED:
                return await self._executor.replay(job, existing, deadline=deadline)
        # This call may run the tool: the plan must be executable and its target unchanged.
        self._decisions.check_executable(record, tool, principal)
        return None

    async def execute_command(
        self,
        tool: Tool,
        bound: BoundArguments,
        principal: Principal,
        *,
        command_id: str,
        call_id: str,
        deadline: float | None = None,
    ) -> WriteOutcome:
        """Run an unconfirmed write keyed by the host's command id (not the model's).

        The contract is `Writes.execute_command`'s.
        """
        spec = tool.spec
        limit = self._clock.monotonic() + spec.timeout
        deadline = limit if deadline is None else min(deadline, limit)
        arguments = canonical_json(dict(bound.json)).decode()
        job = WriteJob(
            tool=tool,
            arguments=bound.json,
            principal=principal,
            key=command_key(
                tenant_id=principal.tenant_id,
                tool=spec.name,
                command_id=command_id,
                user_id=principal.user_id,
                scope=spec.idempotency.scope,
            ),
            plan_hash=intent_hash(
                tool=spec.name,
                schema_version=spec.schema_version,
                arguments=arguments,
                tenant_id=principal.tenant_id,
            ),
            call_id=call_id,
        )
        return await self._shaped(await self._executor.execute(job, deadline=deadline), principal)

    async def record_for(self, plan_id: str, principal: Principal) -> ExecutionRecord | None:
        """The execution record of a plan of the principal's tenant; None until it runs.

        The contract is `Writes.record_for`'s.
        """
        plan = (await self._decisions.get_plan(plan_id, principal)).plan
        key = plan_key(tenant_id=plan.tenant_id, tool=plan.tool, plan_id=plan.plan_id)
        return await self._io(self._store.get_execution, key)

    async def _shaped(self, outcome: WriteOutcome, principal: Principal) -> WriteOutcome:
        """The outcome with its result shaped for the model like any read's result."""
        envelope = outcome.envelope
        tool = self._registry.lookup(envelope.tool, principal)
        if not envelope.ok or tool is None:
            return outcome
        shaped = await self._shaper.shape(
            call_id=envelope.call_id,
            spec=tool.spec,
            principal=principal,
            result=envelope.data,
            ledger=self._ledger,
        )
        return dataclasses.replace(outcome, envelope=shaped)


def _budget(tool: Tool, timeout: float | None) -> float:
    """A plan's run budget: the tool's timeout, or the caller's when shorter."""
    return tool.spec.timeout if timeout is None else min(timeout, tool.spec.timeout)


def _plan_job(plan: Plan, tool: Tool, principal: Principal, key: str, call_id: str) -> WriteJob:
    """The write job of running (or replaying) `plan` under its key."""
    return WriteJob(
        tool=tool,
        arguments=plan.argument_values,
        principal=principal,
        key=key,
        plan_hash=plan.plan_hash,
        plan_id=plan.plan_id,
        expected_version=plan.expected_version,
        call_id=call_id,
    )
