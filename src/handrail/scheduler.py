"""Scheduler: order, concurrency and deadline of the calls of one model turn.

Independent read-only calls run concurrently, bounded overall and per tool; a write runs
alone, in the model's order; declared dependencies and shared resource keys serialize
calls. Every call is handed the request's one absolute deadline. It never decides
whether a call may run (the gate does) and never retries anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from handrail.calls import ToolCall
from handrail.clock import Clock
from handrail.envelope import Envelope, ErrorDetail, Status, Trust
from handrail.errors import ConfigurationError, ErrorCode, HandrailError
from handrail.record.trail import MAX_NAME_IN_AUDIT

__all__ = ["CallPlan", "Execute", "OnCancel", "TurnScheduler"]

Execute = Callable[[ToolCall, float], Awaitable[Envelope]]
"""Runs one call under the request's absolute deadline; always returns its envelope."""

OnCancel = Callable[["CallPlan", bool], None]
"""Told of each call left unfinished by a cancelled or overrun turn, and whether it had
started (a started write's record is left UNKNOWN for the reconciler)."""

_DUPLICATE = "Another call in this turn has the same id; this one was not run."
_BAD_DEPENDENCY = "This call depends on a call that is not earlier in this turn; it was not run."
_DEPENDENCY_FAILED = "A call this one depends on did not succeed, so this one was not run."
_NOT_STARTED = "The turn ran out of time before this call could start; it was not run."
_OVERRUN = "The call ran out of time before it finished. You may retry it once."
_WRITE_OVERRUN = (
    "The write was still running when the time ran out; whether it happened is not known "
    "yet. It is being reconciled under the same key. Do not repeat it and do not tell the "
    "user it failed or succeeded."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class CallPlan:
    """How one call of the turn is scheduled; built by the host, never by the model.

    `resource_key`: calls sharing a key never run concurrently (model order). `after`:
    ids of earlier calls of the turn that must finish, successfully, before this one.
    """

    call: ToolCall
    read_only: bool
    tool: str | None
    """The registered tool's name; None when the name is unknown (no bulkhead applies)."""
    resource_key: str | None = None
    after: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Step:
    """Where one runnable call waits: calls to finish first, and those that must succeed."""

    waits_for: tuple[int, ...]
    needs: tuple[int, ...]


class TurnScheduler:
    """Runs the calls of one model turn and returns their envelopes in call order.

    Rules, all in the model's order:

    - read-only calls run concurrently, at most `max_concurrency` at once and at most
      `bulkheads[tool]` of one tool at once (bounds hold within one turn);
    - a write (``read_only=False``, unknown tools included) runs alone: after every
      earlier call has finished and before any later call starts, so writes are serial
      and never overlap a read (DESIGN invariant 7);
    - calls sharing a `resource_key` run one after the other;
    - a call waits for the calls its `after` names; if one of them did not succeed
      (any error envelope), it is refused with CONFLICT and not run. An `after` naming
      no earlier call of the turn is refused with INVALID_ARGUMENTS;
    - a repeated call id is refused with INVALID_ARGUMENTS, the first one runs;
    - each call gets the request's absolute `deadline` unchanged; a call whose turn
      comes after it is not started and gets TIMEOUT (retryable: nothing ran).

    One call's failure never stops the others. If calls are still running
    `overrun_grace` seconds after the deadline, they are cancelled: a read answers
    TIMEOUT, a write OUTCOME_UNKNOWN (its executor leaves the record UNKNOWN). When the
    awaiting task is cancelled, every unfinished call is cancelled the same way and the
    cancellation propagates. Either way the scheduler waits at most `cancel_grace`
    seconds for cancelled calls to stop (a read's own code kills its subprocesses; a
    write's executor records UNKNOWN), never for a write's downstream answer.
    """

    def __init__(
        self,
        *,
        max_concurrency: int = 8,
        bulkheads: Mapping[str, int] | None = None,
        clock: Clock,
        overrun_grace: float = 0.25,
        cancel_grace: float = 5.0,
    ) -> None:
        bulkheads = dict(bulkheads or {})
        if max_concurrency <= 0 or any(limit <= 0 for limit in bulkheads.values()):
            raise ConfigurationError("concurrency limits and bulkheads must be positive")
        if overrun_grace < 0 or cancel_grace <= 0:
            raise ConfigurationError("the overrun grace may not be negative; cancel_grace > 0")
        self._max_concurrency = max_concurrency
        self._bulkheads: Mapping[str, int] = MappingProxyType(bulkheads)
        self._clock = clock
        self._overrun_grace = overrun_grace
        self._cancel_grace = cancel_grace
        # Calls that did not stop within cancel_grace: kept referenced until they do.
        self._abandoned: set[asyncio.Task[None]] = set()

    async def run(
        self,
        plans: Sequence[CallPlan],
        execute: Execute,
        *,
        deadline: float,
        on_cancel: OnCancel | None = None,
    ) -> list[Envelope]:
        """Run the turn; one envelope per plan, in plan order, matched by call id.

        `deadline` is on the clock's monotonic scale. Raises HandrailError when `execute`
        answers for another call id, and re-raises any exception `execute` raises (after
        cancelling the rest of the turn): both are bugs of the host, not outcomes.
        """
        results: list[Envelope | None] = [None] * len(plans)
        steps = _steps(plans, results)
        started = [False] * len(plans)
        limit = asyncio.Semaphore(self._max_concurrency)
        bulkheads = {name: asyncio.Semaphore(n) for name, n in self._bulkheads.items()}
        tasks: dict[int, asyncio.Task[None]] = {}

        async def one(index: int, step: _Step) -> None:
            plan = plans[index]
            if step.waits_for:
                await asyncio.wait([tasks[j] for j in step.waits_for])
            if any(not _succeeded(results[j]) for j in step.needs):
                results[index] = _refusal(plan, ErrorCode.CONFLICT, _DEPENDENCY_FAILED)
                return
            bulkhead = bulkheads.get(plan.tool) if plan.tool is not None else None
            async with bulkhead or contextlib.nullcontext(), limit:
                if self._clock.monotonic() >= deadline:
                    results[index] = _refusal(plan, ErrorCode.TIMEOUT, _NOT_STARTED, retryable=True)
                    return
                started[index] = True
                envelope = await execute(plan.call, deadline)
            if envelope.call_id != plan.call.id:
                msg = f"execute answered call {envelope.call_id!r} for {plan.call.id!r}"
                raise HandrailError(msg)
            results[index] = envelope

        for index, step in steps.items():
            tasks[index] = asyncio.create_task(one(index, step))
        if tasks:
            wait = max(0.0, deadline - self._clock.monotonic()) + self._overrun_grace
            try:
                done, pending = await asyncio.wait(
                    tasks.values(), timeout=wait, return_when=asyncio.FIRST_EXCEPTION
                )
            except asyncio.CancelledError:
                await self._stop(plans, tasks, started, on_cancel)
                raise
            failures = [exc for task in done if not task.cancelled() and (exc := task.exception())]
            if failures or pending:
                await self._stop(plans, tasks, started, on_cancel)
            if failures:
                raise failures[0]
        return [
            result if result is not None else _overrun(plans[index], started=started[index])
            for index, result in enumerate(results)
        ]

    async def _stop(
        self,
        plans: Sequence[CallPlan],
        tasks: Mapping[int, asyncio.Task[None]],
        started: Sequence[bool],
        on_cancel: OnCancel | None,
    ) -> None:
        """Cancel every unfinished call; wait, bounded, for them to stop; report them."""
        live = {index: task for index, task in tasks.items() if not task.done()}
        for task in live.values():
            task.cancel()
        if live:
            _, stuck = await asyncio.wait(live.values(), timeout=self._cancel_grace)
            for task in stuck:
                self._abandoned.add(task)
                task.add_done_callback(self._abandoned.discard)
        for task in tasks.values():
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: the turn reports the first one only
        if on_cancel is not None:
            for index in sorted(live):
                on_cancel(plans[index], started[index])


def _steps(plans: Sequence[CallPlan], results: list[Envelope | None]) -> dict[int, _Step]:
    """What each runnable call waits for; refusals (duplicates, bad `after`) go to results."""
    first: dict[str, int] = {}
    steps: dict[int, _Step] = {}
    last_write: int | None = None
    since_write: list[int] = []
    last_by_key: dict[str, int] = {}
    for index, plan in enumerate(plans):
        call_id = plan.call.id
        if call_id in first:
            results[index] = _refusal(plan, ErrorCode.INVALID_ARGUMENTS, _DUPLICATE)
            continue
        needs = tuple(first.get(dep, -1) for dep in plan.after)
        first[call_id] = index
        if -1 in needs:
            results[index] = _refusal(plan, ErrorCode.INVALID_ARGUMENTS, _BAD_DEPENDENCY)
            continue
        waits = set(needs)
        if last_write is not None:
            waits.add(last_write)
        if plan.resource_key is not None:
            if plan.resource_key in last_by_key:
                waits.add(last_by_key[plan.resource_key])
            last_by_key[plan.resource_key] = index
        if plan.read_only:
            since_write.append(index)
        else:
            waits.update(since_write)
            last_write, since_write = index, []
        # Refused calls have their result already; only runnable ones are awaited.
        steps[index] = _Step(
            waits_for=tuple(sorted(j for j in waits if j in steps)),
            needs=tuple(dict.fromkeys(needs)),
        )
    return steps


def _succeeded(result: Envelope | None) -> bool:
    return result is not None and result.ok


def _overrun(plan: CallPlan, *, started: bool) -> Envelope:
    """The envelope of a call cancelled by the deadline backstop or never started."""
    if not started:
        return _refusal(plan, ErrorCode.TIMEOUT, _NOT_STARTED, retryable=True)
    if plan.read_only:
        return _refusal(plan, ErrorCode.TIMEOUT, _OVERRUN, retryable=True)
    return _refusal(plan, ErrorCode.OUTCOME_UNKNOWN, _WRITE_OVERRUN)


def _refusal(plan: CallPlan, code: ErrorCode, summary: str, *, retryable: bool = False) -> Envelope:
    return Envelope(
        call_id=plan.call.id,
        tool=plan.tool if plan.tool is not None else str(plan.call.name)[:MAX_NAME_IN_AUDIT],
        status=Status.ERROR,
        summary=summary,
        error=ErrorDetail(code=code, retryable=retryable),
        trust=Trust.HANDRAIL,
        source="handrail",
    )
