"""The seam between Handrail and a task engine: what a task is, and what runs it.

A tool declared `runs_as=TaskMode(...)` is not run inline by the gate: once its checks
(and, for a write, plan → confirm) pass, the gate hands a `TaskSubmission` to a
`TaskRunner`, which runs the tool's `TaskBody` later, on some worker, with checkpointed
steps. The runner is the authority on execution; the task record Handrail keeps (through
the `TaskHost` every runner is given) is what people and models read.

This module holds only values and Protocols: no engine, no store, no process state.
`TaskState` and `TaskScope` live in `handrail.tasking` (the core needs them: the store
and `ToolContext.task`) and are re-exported here as part of the seam.
Implementations: `handrail.tasks.memory.InMemoryTaskRunner` (tests, one process) and
`handrail.tasks.dbos.DbosTaskRunner` (durable, several workers).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from handrail.errors import ErrorCode, ToolRetryable, ToolSignal
from handrail.principal import Principal
from handrail.tasking import TERMINAL_STATES, TaskScope, TaskState

__all__ = [
    "TERMINAL_STATES",
    "TaskBody",
    "TaskCancelled",
    "TaskExpired",
    "TaskFailure",
    "TaskHost",
    "TaskRunner",
    "TaskScope",
    "TaskState",
    "TaskSubmission",
    "task_failure",
]

T = TypeVar("T")


class TaskCancelled(Exception):  # noqa: N818 - a signal that unwinds a task body, not a fault
    """Raised inside a task body at a step boundary once cancellation was requested.

    A body must let it propagate (it may clean up in `finally`); the runner then records
    CANCELLED through `TaskHost.cancelled` and runs no later step.
    """


class TaskExpired(Exception):  # noqa: N818 - a signal that unwinds a task body, not a fault
    """Raised inside a task body at a step boundary once the task's `expires_at` passed.

    The runner then records EXPIRED through `TaskHost.expired` and runs no later step.
    """


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskFailure:
    """How a task body's exception ends an attempt: its code, and whether to retry."""

    code: ErrorCode
    retryable: bool
    retry_after: float | None = None
    message: str | None = None
    """Text written for the model (a `ToolSignal`'s message); None for anything else."""


def task_failure(exc: BaseException) -> TaskFailure:
    """Classify what a task body raised; every runner uses this one rule.

    `ToolRetryable` (and `RateLimited`) is transient: retried while attempts remain.
    Any other `ToolSignal` fails the task with its own code and message. Anything else
    fails it with FAILED_FINAL and no text: undeclared exception text never reaches
    the model (it stays in the runner's log).
    """
    if isinstance(exc, ToolRetryable):
        return TaskFailure(
            code=exc.code, retryable=True, retry_after=exc.retry_after, message=exc.message
        )
    if isinstance(exc, ToolSignal):
        return TaskFailure(code=exc.code, retryable=False, message=exc.message)
    return TaskFailure(code=ErrorCode.FAILED_FINAL, retryable=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskSubmission:
    """One task as the gate hands it to a runner; immutable and JSON-serialisable.

    `task_id` derives from the Handrail idempotency key (`intent_key`): the same intent
    submitted twice carries the same id and is one task. An engine uses it as its own
    workflow / job id. `arguments` are the validated, canonical tool arguments;
    `principal` is `Principal.snapshot()` of the caller, the identity the body runs as.
    `traceparent` / `tracestate` are the W3C trace context of the span that submitted
    it (set by a runner with telemetry), so a worker in any process runs the task
    under a span of the same trace; they travel in the JSON only when set.
    """

    task_id: str
    intent_key: str
    tenant_id: str
    tool: str
    arguments: Mapping[str, Any]
    principal: str
    queue: str
    max_attempts: int
    backoff_seconds: float
    """The delay before the second attempt; each later one doubles, up to `max_backoff_seconds`."""
    max_backoff_seconds: float
    submitted_at: datetime
    expires_at: datetime
    estimate_seconds: float | None = None
    traceparent: str | None = None
    tracestate: str | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            msg = "a task needs max_attempts >= 1"
            raise ValueError(msg)
        if self.backoff_seconds < 0 or self.max_backoff_seconds < self.backoff_seconds:
            msg = "a task needs 0 <= backoff_seconds <= max_backoff_seconds"
            raise ValueError(msg)
        if self.submitted_at.tzinfo is None or self.expires_at.tzinfo is None:
            msg = "a task's timestamps must be timezone-aware"
            raise ValueError(msg)
        object.__setattr__(self, "arguments", MappingProxyType(dict(self.arguments)))

    def caller(self) -> Principal:
        """The principal the task runs as (from the snapshot taken at submission)."""
        return Principal.from_snapshot(self.principal)

    def retry_delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based) before the next one.

        Exponential from `backoff_seconds`, capped at `max_backoff_seconds`; a tool's own
        `retry_after` is honoured when longer.
        """
        delay = min(self.max_backoff_seconds, self.backoff_seconds * 2.0 ** max(0, attempt - 1))
        return max(delay, retry_after or 0.0)

    def to_json(self) -> str:
        """The submission as one JSON string (for an engine's own argument storage)."""
        trace = {
            key: value
            for key, value in (("traceparent", self.traceparent), ("tracestate", self.tracestate))
            if value is not None
        }
        return json.dumps(
            {
                **trace,
                "task_id": self.task_id,
                "intent_key": self.intent_key,
                "tenant_id": self.tenant_id,
                "tool": self.tool,
                "arguments": dict(self.arguments),
                "principal": self.principal,
                "queue": self.queue,
                "max_attempts": self.max_attempts,
                "backoff_seconds": self.backoff_seconds,
                "max_backoff_seconds": self.max_backoff_seconds,
                "submitted_at": self.submitted_at.isoformat(),
                "expires_at": self.expires_at.isoformat(),
                "estimate_seconds": self.estimate_seconds,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> TaskSubmission:
        """The submission `to_json()` wrote."""
        data = json.loads(text)
        data["submitted_at"] = datetime.fromisoformat(data["submitted_at"])
        data["expires_at"] = datetime.fromisoformat(data["expires_at"])
        return cls(**data)


TaskBody = Callable[[Mapping[str, Any], TaskScope], Awaitable[Any]]
"""A task tool's long body: (validated arguments, scope) → a JSON-serialisable result."""


class TaskHost(Protocol):
    """What Handrail offers a runner: the task record and the execution record.

    Implemented by `handrail.tasks.records.TaskRecords`. A runner reports every move of
    a task here, from whichever worker runs it; every method is idempotent (a recovered
    worker may repeat a report) and tenant-blind (the runner holds only task ids).
    """

    async def begin(self, task_id: str, *, attempt: int, worker: str) -> bool:
        """Record RUNNING with `worker` as lease holder, before an attempt runs its body.

        False when the body must not run: the task is already terminal, cancellation was
        requested (recorded CANCELLED), or it expired (recorded EXPIRED).
        """
        ...

    async def checkpoint(self, task_id: str, *, worker: str) -> None:
        """Heartbeat at a step boundary; raises `TaskCancelled` or `TaskExpired` to stop.

        A cancellation requested through Handrail (the `cancel_task` tool or the CLI, in
        any process) is noticed here, so a runner need not poll for it itself.
        """
        ...

    async def progress(
        self, task_id: str, fraction: float, message: str | None, *, worker: str
    ) -> None:
        """Store progress (clamped, sanitised) and count it as a heartbeat."""
        ...

    async def heartbeat(self, task_id: str, *, worker: str) -> bool:
        """Renew `worker`'s lease on a RUNNING task while its body runs (between steps too).

        Never raises to stop the body (`checkpoint` does that). False when the lease is
        not `worker`'s: another worker took the task over, or it is no longer RUNNING.
        """
        ...

    async def take_over(self, task_id: str, *, worker: str, lease_seconds: float) -> str | None:
        """Claim a RUNNING task whose holder's lease ran out, by compare-and-set.

        The lease runs out when the last heartbeat is `lease_seconds` old (on the host's
        clock). Returns the holder it was taken from, or None when it was not taken (not
        RUNNING, lease still held, already `worker`'s): of two workers asking at once,
        one gets it.
        """
        ...

    async def retrying(
        self, task_id: str, *, attempt: int, failure: TaskFailure, retry_at: datetime
    ) -> None:
        """Attempt `attempt` failed transiently; the task is QUEUED again until `retry_at`."""
        ...

    async def succeeded(self, task_id: str, result: Any) -> None:  # noqa: ANN401 - JSON
        """Record SUCCEEDED with the body's result (a large one goes to the raw store)."""
        ...

    async def failed(self, task_id: str, failure: TaskFailure) -> None:
        """Record FAILED with the failure's code (final, or attempts exhausted)."""
        ...

    async def cancelled(self, task_id: str) -> None:
        """Record CANCELLED (the body stopped at a step boundary, or never started)."""
        ...

    async def expired(self, task_id: str) -> None:
        """Record EXPIRED (the body stopped at a step boundary, or never started)."""
        ...

    async def effect(
        self, submission: TaskSubmission, name: str, fn: Callable[[], Awaitable[T]]
    ) -> T:
        """Run one external write of a task through the execution record (`TaskScope.effect`)."""
        ...


class TaskRunner(Protocol):
    """Runs task bodies durably; one instance per worker process.

    Every runner is constructed with a `TaskHost` and reports every state change through
    it: `begin` before an attempt, `checkpoint` before each step, then exactly one of
    `succeeded` / `failed` / `cancelled` / `expired` (or `retrying` between attempts).
    A body's exception is classified with `task_failure`; `TaskCancelled` and
    `TaskExpired` are not failures. Attempts past `max_attempts` are never started.
    """

    def register(self, tool: str, body: TaskBody) -> None:
        """Make `body` the body of tasks of `tool`; before `start`. A repeat name raises."""
        ...

    async def start(self) -> None:
        """Begin taking tasks; recovers tasks this worker or a dead worker left unfinished.

        A recovered task resumes after its last finished step (finished steps are not run
        again) with `attempt` counted up.
        """
        ...

    async def stop(self) -> None:
        """Stop taking tasks; running bodies are abandoned to recovery, not failed."""
        ...

    async def submit(self, submission: TaskSubmission) -> bool:
        """Enqueue a task under `submission.task_id`; idempotent.

        Handrail has stored the task's record (QUEUED) before it calls `submit`.

        True when this call created the task; False when a task of that id already
        existed (in any state): nothing new is enqueued, it is one task.
        """
        ...

    async def cancel(self, task_id: str) -> bool:
        """Ask the engine to stop a task; True when it was not yet terminal.

        A queued task never runs; a running one stops at its next step boundary. The
        record is moved to CANCELLED through `TaskHost.cancelled` by the worker that
        notices it (or by the caller when the task never started).
        """
        ...
