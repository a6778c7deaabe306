"""TaskService: binds task tools to a runner, submits checked calls, and answers about tasks.

`bind(tool)` turns a `runs_as=TaskMode(...)` tool into the tool the registry holds: the
gate takes it through the four checks (and, for a write, plan → confirm → the execution
record) exactly like any other, and "running" it submits the task. A write's execution
record keeps the QUEUED answer as its result, so a repeat of the same key answers the
same task; the task id derives from that key. A read's intent is (tenant, user, tool,
arguments): it answers its latest task while that task runs and, once it succeeded,
for `TaskMode.dedupe_seconds` after it was submitted; then (or at once after a task
that failed, was cancelled or expired) a new submission is the intent's
next generation, a new task with a new id (`_read_task`). The body runs later, through
the runner, with `ctx.task` set.

The QUEUED answer (the envelope's data) is stable:
`{"task_id": "task_…", "state": "queued", "estimate_seconds": 120.0 | null,
"check_with": "get_task_status"}` (`state` is the task's state when it was answered).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timedelta
from typing import Any

from handrail.canonical import canonical_json, sha256_hex
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.declare.definition import BoundArguments, Tool
from handrail.errors import ConfigurationError, StoreError
from handrail.principal import Principal
from handrail.shaping.policy import ResultPolicy
from handrail.spec import TaskMode
from handrail.tasking import TaskRecord, TaskScope, TaskState
from handrail.tasks.records import TaskRecords, result_value
from handrail.tasks.runner import TaskBody, TaskRunner, TaskSubmission

__all__ = ["TaskService", "describe", "task_id_for"]


_GENERATION_TRIES = 64


def task_id_for(intent_key: str, generation: int = 0) -> str:
    """The task id of an intent's `generation`-th task: the same pair is always one task."""
    seed = intent_key if generation == 0 else f"{intent_key}#{generation}"
    return "task_" + sha256_hex(seed.encode())[:32]


def _answers(record: TaskRecord, mode: TaskMode, now: datetime) -> bool:
    """True while a read's task still answers its intent (see `TaskMode.dedupe_seconds`).

    An active task answers until it expires; a SUCCEEDED one within the window. A task
    that failed, was cancelled or expired never answers again: asking again is a new try.
    """
    if not record.terminal:
        return now < record.expires_at
    if record.state is not TaskState.SUCCEEDED:
        return False
    return now < record.created_at + timedelta(seconds=mode.dedupe_seconds)


def _read_key(principal: Principal, tool: str, arguments: Mapping[str, Any]) -> str:
    document = {
        "kind": "task",
        "tenant": principal.tenant_id,
        "user": principal.user_id,
        "tool": tool,
        "arguments": dict(arguments),
    }
    return "hk1_" + sha256_hex(canonical_json(document))


def describe(record: TaskRecord, *, people: bool = False) -> dict[str, Any]:
    """What a status answer says about a task; `people` adds the raw store's reference.

    A model is told only that a large result is kept: the reference is a bearer-like
    token it has no use for; the host downloads by task id (`TaskService.download`).
    """
    view: dict[str, Any] = {
        "task_id": record.task_id,
        "tool": record.tool,
        "state": record.state.value,
        "progress": record.progress,
        "message": record.progress_message,
        "attempts": record.attempts,
        "max_attempts": record.max_attempts,
        "created_at": record.created_at.isoformat(),
        "started_at": None if record.started_at is None else record.started_at.isoformat(),
        "finished_at": None if record.finished_at is None else record.finished_at.isoformat(),
        "expires_at": record.expires_at.isoformat(),
    }
    if record.error_code is not None:
        view["error_code"] = record.error_code
        view["error_message"] = record.error_message
    if record.state is TaskState.SUCCEEDED:
        if record.result_ref is not None:
            view["result_kept"] = "too large to show here; the user can download it"
            if people:
                view["result_ref"] = record.result_ref
        else:
            view["result"] = result_value(record)
    return view


def _submission(record: TaskRecord, mode: TaskMode) -> TaskSubmission:
    return TaskSubmission(
        task_id=record.task_id,
        intent_key=record.intent_key,
        tenant_id=record.tenant_id,
        tool=record.tool,
        arguments=_json_object(record.arguments),
        principal=record.principal,
        queue=record.queue,
        max_attempts=record.max_attempts,
        backoff_seconds=mode.backoff_seconds,
        max_backoff_seconds=mode.max_backoff_seconds,
        submitted_at=record.created_at,
        expires_at=record.expires_at,
        estimate_seconds=record.estimate_seconds,
    )


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


class TaskService:
    """Task tools bound to one runner and one set of records (see the module docstring)."""

    def __init__(self, records: TaskRecords, runner: TaskRunner, *, clock: Clock) -> None:
        self._records = records
        self._runner = runner
        self._clock = clock
        self._modes: dict[str, TaskMode] = {}

    @property
    def records(self) -> TaskRecords:
        """The task records this service writes and reads."""
        return self._records

    @property
    def runner(self) -> TaskRunner:
        """The runner tasks are submitted to."""
        return self._runner

    def bind(self, tool: Tool) -> Tool:
        """The tool to register: checked like any other, submitted instead of run.

        Registers the tool's body with the runner (before the runner starts).
        """
        mode = tool.spec.task
        if mode is None:
            raise ConfigurationError(f"tool {tool.name!r} does not run as a task")
        name = tool.spec.name
        self._runner.register(name, self._body(tool, mode))
        self._records.limit_results(name, mode.max_result_chars)
        self._modes[name] = mode
        # The QUEUED answer is Handrail's own small object: no projection of the result.
        spec = dataclasses.replace(tool.spec, results=ResultPolicy())
        return dataclasses.replace(
            tool, spec=spec, _invoke=self._submitter(name, mode), needs_context=True
        )

    async def submit(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        principal: Principal,
        *,
        intent_key: str | None = None,
    ) -> TaskRecord:
        """Submit a bound tool's task (once per intent); the task's record.

        The gate calls this through the bound tool, after every check; `intent_key` is
        the write's idempotency key (None for a read: tenant, user, tool and arguments).
        """
        mode = self._modes.get(tool)
        if mode is None:
            raise ConfigurationError(f"tool {tool!r} is not bound to this TaskService")
        key = intent_key or _read_key(principal, tool, arguments)
        now = self._clock.now()

        def fresh(generation: int) -> TaskSubmission:
            return TaskSubmission(
                task_id=task_id_for(key, generation),
                intent_key=key,
                tenant_id=principal.tenant_id,
                tool=tool,
                arguments=arguments,
                principal=principal.snapshot(),
                queue=mode.queue,
                max_attempts=mode.max_attempts,
                backoff_seconds=mode.backoff_seconds,
                max_backoff_seconds=mode.max_backoff_seconds,
                submitted_at=now,
                expires_at=now + timedelta(seconds=mode.expires_after_seconds),
                estimate_seconds=mode.estimate_seconds,
            )

        if intent_key is not None:
            record, _ = await self._records.create(fresh(0))
        else:
            record = await self._read_task(key, fresh, mode)
        if not record.terminal:
            # Also after a crash between the record and the runner: submitting is idempotent.
            await self._runner.submit(_submission(record, mode))
        return record

    async def _read_task(
        self, key: str, fresh: Callable[[int], TaskSubmission], mode: TaskMode
    ) -> TaskRecord:
        """The read intent's task that still answers, or a new one of the next generation.

        The store decides the generation: the new task's id derives from (key, generation)
        and is inserted only if absent, so of racing submissions exactly one creates it and
        the others read it back (and answer it); a lost race to a task that no longer
        answers moves on to the generation after it.
        """
        found = await self._records.latest(key)
        for _ in range(_GENERATION_TRIES):
            if found is not None and _answers(found, mode, self._clock.now()):
                return found
            generation = 0 if found is None else found.generation + 1
            found, created = await self._records.create(fresh(generation), generation=generation)
            if created:
                return found
        raise StoreError(  # pragma: no cover - 64 generations lost in a row to stale tasks
            f"no task generation settled under {_GENERATION_TRIES} submissions"
        )

    async def status(self, task_id: str, principal: Principal) -> dict[str, Any]:
        """A task of the principal's tenant, described; NOT_FOUND (AccessRefusedError) else."""
        return describe(await self._records.get(task_id, principal))

    async def cancel(self, task_id: str, principal: Principal) -> dict[str, Any]:
        """Cancel a task of the principal's tenant (see `TaskRecords.request_cancel`)."""
        record = await self._records.request_cancel(task_id, principal)
        # The engine too: a queued task is dropped, a running one stops at its next step
        # even where the engine notices before the record is read. Idempotent.
        await self._runner.cancel(task_id)
        return describe(record)

    async def download(self, task_id: str, principal: Principal) -> bytes:
        """The whole result of a finished task of the principal's tenant (JSON bytes).

        The controlled download: NOT_FOUND for another tenant's task, one without a
        result, or an expired one; a large result is read from the raw store as
        `RawResults.read` allows (its owner, or a holder of the raw-read permission).
        """
        return await self._records.result(task_id, principal)

    async def list(
        self, principal: Principal, *, state: TaskState | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The tenant's tasks, newest first, described."""
        found = await self._records.list(principal, state=state, limit=limit)
        return [describe(record) for record in found]

    # --- the bound tool's two halves ----------------------------------------------------------

    def _submitter(self, name: str, mode: TaskMode) -> Any:  # noqa: ANN401 - the Tool's private invoke type
        async def submit(bound: BoundArguments, ctx: ToolContext | None) -> object:
            if ctx is None:  # pragma: no cover - a bound tool always needs its context
                raise ConfigurationError("a task tool needs its ToolContext")
            record = await self.submit(
                name, bound.json, ctx.principal, intent_key=ctx.idempotency_key
            )
            return {
                "task_id": record.task_id,
                "state": record.state.value,
                "estimate_seconds": mode.estimate_seconds,
                "check_with": "get_task_status",
            }

        return submit

    def _body(self, tool: Tool, mode: TaskMode) -> TaskBody:
        clock = self._clock

        def body(arguments: Mapping[str, Any], scope: TaskScope) -> Coroutine[Any, Any, object]:
            ctx = ToolContext(
                principal=scope.principal,
                call_id=scope.task_id,
                tool=tool.spec.name,
                deadline=clock.monotonic() + mode.expires_after_seconds,
                clock=clock,
                attempt=scope.attempt,
                task=scope,
            )
            return tool.invoke(tool.bind(dict(arguments)), ctx)

        return body
