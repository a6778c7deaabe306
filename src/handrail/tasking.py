"""The vocabulary of long tasks that the core shares with the task face (`handrail.tasks`).

States, the record people and models read, and the scope a running task body is handed.
Owns `TaskState`, `TaskRecord` (its invariants; the store keeps it by compare-and-set on
`version`) and the `TaskScope` Protocol (`ToolContext.task`). Never runs, submits or
stores a task: that is `handrail.tasks`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from handrail.principal import Principal

__all__ = ["TERMINAL_STATES", "TaskRecord", "TaskScope", "TaskState", "task_id_valid"]

T = TypeVar("T")

_TASK_ID = re.compile(r"task_[0-9a-f]{32}")
_MAX_NAME = 256
_MAX_MESSAGE = 200
_MAX_QUEUE = 64


class TaskState(StrEnum):
    """The life of a task: QUEUED → RUNNING → SUCCEEDED | FAILED | CANCELLED | EXPIRED.

    A retry moves RUNNING back to QUEUED (with a later `retry_at`); terminal states
    never change again.
    """

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


TERMINAL_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED, TaskState.EXPIRED},
)


def task_id_valid(task_id: object) -> bool:
    """True for the shape Handrail gives task ids (`task_` + 32 hex digits)."""
    return isinstance(task_id, str) and _TASK_ID.fullmatch(task_id) is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskRecord:
    """One task as stored: who asked, what, where it is, and how it ended.

    `arguments` and `result` are canonical JSON text; `result` holds a small shaped
    result, `result_ref` the raw store's reference of a large one. `principal` is the
    caller's snapshot. `progress_message` is untrusted display text, already bounded
    and sanitised. `version` grows by one with every write of the row (compare-and-set).
    `generation` counts the tasks of one `intent_key` (0 first): a read asked again after
    its dedupe window is the next generation, a new task with its own id.
    """

    task_id: str
    tenant_id: str
    user_id: str
    tool: str
    intent_key: str
    principal: str
    arguments: str
    queue: str
    state: TaskState
    created_at: datetime
    expires_at: datetime
    max_attempts: int
    attempts: int = 0
    progress: float = 0.0
    progress_message: str | None = None
    lease_holder: str | None = None
    heartbeat_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    retry_at: datetime | None = None
    cancel_requested: bool = False
    error_code: str | None = None
    error_message: str | None = None
    result: str | None = None
    result_ref: str | None = None
    estimate_seconds: float | None = None
    version: int = 1
    generation: int = 0

    def __post_init__(self) -> None:
        if not task_id_valid(self.task_id):
            msg = "a task id is 'task_' and 32 lower-case hex digits"
            raise ValueError(msg)
        for name in ("tenant_id", "user_id", "tool", "intent_key", "lease_holder"):
            value = getattr(self, name)
            if value is not None and (not value or len(value) > _MAX_NAME or "\x00" in value):
                msg = f"a task's {name} is 1-{_MAX_NAME} characters without NUL"
                raise ValueError(msg)
        if not self.queue or len(self.queue) > _MAX_QUEUE:
            msg = f"a task's queue is 1-{_MAX_QUEUE} characters"
            raise ValueError(msg)
        message = self.progress_message
        if message is not None and (len(message) > _MAX_MESSAGE or not message.isprintable()):
            msg = f"a progress message is at most {_MAX_MESSAGE} printable characters"
            raise ValueError(msg)
        if not 0.0 <= self.progress <= 1.0:
            msg = "a task's progress is a fraction in [0, 1]"
            raise ValueError(msg)
        if self.version < 1 or self.attempts < 0 or self.max_attempts < 1 or self.generation < 0:
            msg = "a task's version and max_attempts start at 1, attempts and generation at 0"
            raise ValueError(msg)
        times = (self.created_at, self.expires_at, self.heartbeat_at, self.started_at)
        later = (self.finished_at, self.retry_at)
        if any(t is not None and t.utcoffset() is None for t in (*times, *later)):
            msg = "a task's times must be timezone-aware"
            raise ValueError(msg)
        object.__setattr__(self, "state", TaskState(self.state))

    @property
    def terminal(self) -> bool:
        """True once the task ended (it never changes again)."""
        return self.state in TERMINAL_STATES


class TaskScope(Protocol):
    """What a running task body may do: checkpointed steps, progress, exactly-once effects.

    A body gets it as `ToolContext.task`. A runner builds one scope per attempt. Before
    every `step`, `effect` and `progress` the scope calls `TaskHost.checkpoint`
    (heartbeat + cancellation/expiry check), so cancellation and expiry are noticed at
    the next step boundary as `TaskCancelled` / `TaskExpired` raised into the body.
    Step names must be unique within one task.
    """

    @property
    def task_id(self) -> str:
        """The task's id."""
        ...

    @property
    def principal(self) -> Principal:
        """Who the task runs as (never anything the model wrote)."""
        ...

    @property
    def attempt(self) -> int:
        """1 for the first attempt; a retry or a recovery after a dead worker counts up."""
        ...

    async def step(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn` once and checkpoint its JSON-serialisable result under `name`.

        Guarantee: a step that finished in an earlier attempt (or on a dead worker) is
        not run again; its checkpointed result is returned. A step that had started but
        not finished is run again, so a step must be safe to repeat (use `effect` for
        an external write).
        """
        ...

    async def effect(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run an external write exactly once, through Handrail's execution record.

        Guarantee: the write is keyed by (task id, `name`); a finished effect returns its
        recorded result without running again; an effect whose outcome is unproven
        (crash or timeout while running) is not run again and fails the task with
        OUTCOME_UNKNOWN until reconciled. Implemented by `TaskHost.effect`.
        """
        ...

    async def progress(self, fraction: float, message: str | None = None) -> None:
        """Report progress (0..1, clamped) and an optional short message for people.

        Also a heartbeat and a cancellation/expiry check. The message is untrusted text
        for display: the host bounds and sanitises it before storing.
        """
        ...
