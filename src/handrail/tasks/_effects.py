"""A task's external writes through the execution record: exactly once, UNKNOWN when unproven.

`TaskEffects.run` keys each effect by (task id, step name), so a step re-run after a
crash or on another worker finds the record its first run left: a finished effect is
replayed (not run again), an unproven one fails the task with OUTCOME_UNKNOWN until the
Reconciler settles it. It reuses `handrail.writes.executor.Executor` unchanged; it never
decides a task's state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from handrail.canonical import canonical_json, sha256_hex
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.errors import ErrorCode, ToolRetryable, ToolSignal
from handrail.spec import (
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
    RiskLevel,
    SideEffect,
)
from handrail.tasks.runner import TaskSubmission
from handrail.writes.executor import Executor, WriteJob

__all__ = ["TaskEffectFailed", "TaskEffects", "effect_key"]

T = TypeVar("T")

_RETRYABLE = frozenset({ErrorCode.TRANSIENT, ErrorCode.IN_PROGRESS, ErrorCode.TIMEOUT})


class TaskEffectFailed(ToolSignal):
    """An effect of a task ended with a code (OUTCOME_UNKNOWN, FAILED_FINAL, ...)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def effect_key(task_id: str, name: str) -> str:
    """The idempotency key of one effect of one task: stable across attempts and workers."""
    document = {"kind": "task-effect", "task": task_id, "step": name}
    return "hk1_" + sha256_hex(canonical_json(document))


class TaskEffects:
    """Runs task effects with one executor (`Writes.executor`) under its clock."""

    def __init__(self, executor: Executor, *, clock: Clock, timeout: float = 60.0) -> None:
        self._executor = executor
        self._clock = clock
        self._timeout = timeout

    async def run(self, submission: TaskSubmission, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn` once under the effect's key; its (JSON) result, replayed on a repeat."""

        async def invoke(_arguments: dict[str, Any], _ctx: ToolContext) -> object:
            return await fn()

        tool = Tool.from_json_schema(
            name=submission.tool,
            description=f"An effect of a {submission.tool} task.",
            input_schema={"type": "object", "properties": {}},
            fn=invoke,
            risk=RiskLevel.L2_REVERSIBLE_WRITE,
            side_effect=SideEffect.EXTERNAL_WRITE,
            confirmation=ConfirmationPolicy(),
            idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
            timeout=self._timeout,
        )
        key = effect_key(submission.task_id, name)
        job = WriteJob(
            tool=tool,
            arguments={},
            principal=submission.caller(),
            key=key,
            plan_hash=sha256_hex(key.encode()),
            call_id=f"{submission.task_id}/{name}"[:256],
        )
        outcome = await self._executor.execute(
            job, deadline=self._clock.monotonic() + self._timeout
        )
        envelope = outcome.envelope
        if envelope.ok:
            return cast("T", envelope.data)
        code = envelope.error_type or ErrorCode.FAILED_FINAL
        if code in _RETRYABLE:
            raise ToolRetryable(envelope.summary)
        raise TaskEffectFailed(code, envelope.summary)
