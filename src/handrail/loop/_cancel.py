"""Cancelling a stored run: when it may be, its plans declined, and the words its chat keeps.

A SUSPENDED run may be cancelled at any time; a RUNNING one only once it cannot still
be running: its deadline, counted from its last stored version, and a grace margin
have passed, so the process that drove it has stopped. The plans it waits for are
rejected through Writes; one that executed (or started to) is never reported as
declined: the cancel is refused, and resuming the run with that plan tells the model
what it did. It never asks a model or runs a call; it stores only its claim on a run.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from handrail.errors import ConfigurationError, ErrorCode, WriteRefusedError
from handrail.loop._run_log import read_run
from handrail.loop._session import RunRefusedError
from handrail.plans import PlanState
from handrail.runs import RunRecord, RunState

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.loop._agent_record import PendingPlan, RunData
    from handrail.loop.budgets import RunBudget
    from handrail.principal import Principal
    from handrail.store.base import Store
    from handrail.writes.service import Writes

__all__ = [
    "CANCEL_GRACE_SECONDS",
    "MAX_REASON",
    "cancelled_text",
    "check_cancellable",
    "check_reason",
    "claim_declined",
    "decline",
]

CANCEL_GRACE_SECONDS = 60.0
"""How long past its deadline a RUNNING run must be before it may be cancelled.

Covers what a live drive does after its deadline: storing its end, a slow store."""

MAX_REASON = 1000
"""The longest reason a cancel takes, in characters (it is shown to the next model)."""

_CLOSED = frozenset({PlanState.REJECTED, PlanState.EXPIRED})
"""Plan states that mean the plan never executed and never will."""


def check_reason(reason: str) -> str:
    """The person's reason, if it is text that is not blank and not too long."""
    if not isinstance(reason, str) or not reason.strip():
        msg = "a cancel needs a reason that is not blank"
        raise ConfigurationError(msg)
    if len(reason) > MAX_REASON:
        msg = f"a cancel's reason is at most {MAX_REASON} characters"
        raise ConfigurationError(msg)
    return reason


def check_cancellable(
    record: RunRecord, data: RunData, budget: RunBudget, *, now: datetime
) -> None:
    """CONFLICT unless the run is SUSPENDED, or RUNNING well past its deadline.

    A run stored RUNNING at `updated_at` runs no longer than what its deadline left
    then (its budget snapshot holds the active seconds spent). A resumed run runs under
    its loop's `budget`: the longer of that deadline and the recorded one counts.
    """
    deadline_seconds = max(data.limits.deadline_seconds, budget.deadline_seconds)
    if record.state.ended:
        raise RunRefusedError(
            ErrorCode.CONFLICT, f"The run is {record.state.value.lower()}: nothing to cancel."
        )
    if record.state is not RunState.RUNNING:
        return
    spent = data.budget.get("elapsed_seconds")
    elapsed = float(spent) if isinstance(spent, int | float) and math.isfinite(spent) else 0.0
    left = max(0.0, deadline_seconds - max(0.0, elapsed))
    free_at = record.updated_at + timedelta(seconds=left + CANCEL_GRACE_SECONDS)
    if now < free_at:
        raise RunRefusedError(
            ErrorCode.CONFLICT,
            "The run is running. If the process driving it stopped, it can be cancelled "
            f"once its deadline has passed, {math.ceil((free_at - now).total_seconds())} "
            "seconds from now.",
        )


async def claim_declined(
    store: Store,
    clock: Clock,
    record: RunRecord,
    *,
    writes: Writes | None,
    principal: Principal,
    reason: str,
) -> RunRecord:
    """Claim the run from `record` (stored RUNNING, so no resume proceeds), then decline.

    The claimed record, once every plan it waits for is rejected (`decline`). When
    that fails, the run is stored SUSPENDED again, waiting for its plans as before,
    and the error propagates. CONFLICT if another process moved the run first.
    """
    pending = read_run(record).pending
    if pending and writes is None:
        msg = "cancelling a run that waits for plans needs an AgentLoop with writes"
        raise ConfigurationError(msg)
    claimed = record.advanced(at=clock.now(), state=RunState.RUNNING)
    if not await asyncio.to_thread(store.update_run, claimed, expect_version=record.version):
        raise RunRefusedError(ErrorCode.CONFLICT, "The run was moved by another process.")
    if writes is None or not pending:
        return claimed
    try:
        await decline(writes, pending, principal, reason=reason)
    except BaseException:
        released = claimed.advanced(at=clock.now(), state=RunState.SUSPENDED)
        await asyncio.to_thread(store.update_run, released, expect_version=claimed.version)
        raise
    return claimed


async def decline(
    writes: Writes, pending: Sequence[PendingPlan], principal: Principal, *, reason: str
) -> None:
    """Reject each plan the run waits for that is still open, for `reason`.

    A plan that executed is CONFLICT before any is rejected; one whose execution
    started meanwhile (the reject is PLAN_CLOSED, and it was not rejected or expired
    by another) is CONFLICT too, the plans before it staying rejected.
    """
    records = [await writes.get_plan(plan.plan_id, principal) for plan in pending]
    for plan, record in zip(pending, records, strict=True):
        if record.state is PlanState.EXECUTED:
            raise _executed(plan)
    for plan, record in zip(pending, records, strict=True):
        if record.state in _CLOSED:
            continue
        try:
            await writes.reject(plan.plan_id, principal, reason=reason)
        except WriteRefusedError as exc:
            if exc.code is not ErrorCode.PLAN_CLOSED:
                raise
            fresh = await writes.get_plan(plan.plan_id, principal)
            if fresh.state not in _CLOSED:
                raise _executed(plan) from None


def _executed(plan: PendingPlan) -> RunRefusedError:
    return RunRefusedError(
        ErrorCode.CONFLICT,
        f"Plan {plan.plan_id} was executed, or its execution has started: resume the run "
        "with it (no token) so the model learns its outcome; cancel after that.",
    )


def cancelled_text(pending: Sequence[PendingPlan], reason: str) -> str:
    """The user turn that tells the next model the person cancelled the run, and why.

    Each plan the run waited for is named as declined and not executed, so that no
    model claims its effect; without plans, the run had stopped part-way.
    """
    quoted = json.dumps(reason, ensure_ascii=False)
    if not pending:
        return (
            "[handrail] The user cancelled this run in the application after it had "
            "stopped without finishing: nothing after the last result above is known to "
            f"have happened. The user's reason: {quoted}."
        )
    lines = [
        f"[handrail] The user declined plan {plan.plan_id} (proposed by call "
        f"{plan.call_id} of {plan.tool}) in the application: it was not executed and "
        "will not be."
        for plan in pending
    ]
    lines.append(f"The user cancelled this run; their reason: {quoted}.")
    return "\n".join(lines)
