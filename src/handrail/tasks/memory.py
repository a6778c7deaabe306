"""InMemoryTaskRunner: the TaskRunner seam in one process, for tests and `handrail.testing`.

Real asyncio tasks; step checkpoints in a `MemoryJournal` that outlives a runner, so a
second runner on the same journal recovers what a stopped one left (after its last
finished step); cancellation and expiry at step boundaries; transient failures retried
with backoff on the injected clock and sleep. Not durable across processes: production
uses `handrail.tasks.dbos.DbosTaskRunner`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from handrail.clock import Clock
from handrail.errors import ConfigurationError
from handrail.principal import Principal
from handrail.retry import Sleep
from handrail.tasking import TaskState
from handrail.tasks._telemetry import TaskTrace, stamped, task_trace
from handrail.tasks.runner import (
    TaskBody,
    TaskCancelled,
    TaskExpired,
    TaskFailure,
    TaskHost,
    TaskSubmission,
    task_failure,
)

if TYPE_CHECKING:
    from handrail.telemetry import Telemetry

__all__ = ["InMemoryTaskRunner", "MemoryJournal"]

T = TypeVar("T")


@dataclass(kw_only=True)
class MemoryJournal:
    """What an engine would keep durably: submissions, finished steps, finished tasks."""

    submissions: dict[str, TaskSubmission] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)


class _Scope:
    """The TaskScope of one attempt: checkpoints in the journal, reports to the host."""

    def __init__(
        self,
        runner: InMemoryTaskRunner,
        submission: TaskSubmission,
        attempt: int,
    ) -> None:
        self._runner = runner
        self._submission = submission
        self._attempt = attempt
        self._principal = submission.caller()
        self._names: set[str] = set()

    @property
    def task_id(self) -> str:
        return self._submission.task_id

    @property
    def principal(self) -> Principal:
        return self._principal

    @property
    def attempt(self) -> int:
        return self._attempt

    async def step(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        done = self._runner.journal.steps.setdefault(self.task_id, {})
        self._claim(name)
        if name in done:
            return cast("T", done[name])
        await self._boundary()
        result = await fn()
        # Only what an engine could store survives a crash: keep the JSON round trip.
        done[name] = json.loads(json.dumps(result))
        return cast("T", done[name])

    async def effect(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        self._claim(name)
        await self._boundary()
        return await self._runner.host.effect(self._submission, name, fn)

    async def progress(self, fraction: float, message: str | None = None) -> None:
        self._runner.check_cancelled(self.task_id)
        await self._runner.host.progress(
            self.task_id, fraction, message, worker=self._runner.worker
        )

    def _claim(self, name: str) -> None:
        if name in self._names:
            msg = f"step name {name!r} used twice in one task"
            raise ConfigurationError(msg)
        self._names.add(name)

    async def _boundary(self) -> None:
        self._runner.check_cancelled(self.task_id)
        await self._runner.host.checkpoint(self.task_id, worker=self._runner.worker)


class InMemoryTaskRunner:
    """Runs task bodies as asyncio tasks of this process (see the module docstring).

    `concurrency` limits how many tasks of a queue run at once (unlimited when absent).
    `sleep` waits out retry backoff; tests pass one that does not wait. With
    `telemetry`, a submission carries its submitter's trace context and each run is a
    span under it (`handrail.tasks._telemetry`).
    """

    def __init__(
        self,
        host: TaskHost,
        *,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
        worker: str = "memory-worker",
        journal: MemoryJournal | None = None,
        concurrency: Mapping[str, int] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.host = host
        self.worker = worker
        self.journal = journal if journal is not None else MemoryJournal()
        self._clock = clock
        self._sleep = sleep
        self._bodies: dict[str, TaskBody] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._cancelled: set[str] = set()
        self._limits = {q: asyncio.Semaphore(n) for q, n in (concurrency or {}).items()}
        self._started = False
        self._telemetry = telemetry

    def register(self, tool: str, body: TaskBody) -> None:
        """Make `body` the body of `tool`'s tasks; a repeat name raises."""
        if tool in self._bodies:
            msg = f"a task body for {tool!r} is registered already"
            raise ConfigurationError(msg)
        self._bodies[tool] = body

    async def start(self) -> None:
        """Take tasks; resume every unfinished task of the journal (recovery)."""
        self._started = True
        for submission in list(self.journal.submissions.values()):
            if submission.task_id not in self.journal.finished:
                self._spawn(submission)

    async def stop(self) -> None:
        """Abandon running bodies to recovery (their record stays as it is)."""
        self._started = False
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        self._running.clear()

    async def submit(self, submission: TaskSubmission) -> bool:
        """Enqueue once per task id; False when the id was submitted before."""
        if submission.tool not in self._bodies:
            msg = f"no task body is registered for {submission.tool!r}"
            raise ConfigurationError(msg)
        if submission.task_id in self.journal.submissions:
            return False
        if self._telemetry is not None:
            submission = stamped(submission)
        self.journal.submissions[submission.task_id] = submission
        if self._started:
            self._spawn(submission)
        return True

    async def cancel(self, task_id: str) -> bool:
        """Stop a task at its next step boundary; True when it was not finished."""
        if task_id not in self.journal.submissions or task_id in self.journal.finished:
            return False
        self._cancelled.add(task_id)
        return True

    async def drain(self) -> None:
        """Wait until every task this runner started has ended (for tests)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    def check_cancelled(self, task_id: str) -> None:
        """Raise TaskCancelled when this runner was asked to cancel `task_id`."""
        if task_id in self._cancelled:
            raise TaskCancelled

    # --- running ----------------------------------------------------------------------------

    def _spawn(self, submission: TaskSubmission) -> None:
        if submission.task_id in self._running:
            return
        task = asyncio.create_task(self._run(submission), name=f"task {submission.task_id}")
        self._running[submission.task_id] = task
        task.add_done_callback(lambda _: self._running.pop(submission.task_id, None))

    async def _run(self, submission: TaskSubmission) -> None:
        limit = self._limits.get(submission.queue)
        if limit is None:
            await self._attempts(submission)
            return
        async with limit:
            await self._attempts(submission)

    async def _attempts(self, submission: TaskSubmission) -> None:
        # The run's span starts once the task holds its queue's place: it measures work.
        with task_trace(self._telemetry, submission) as trace:
            while await self._attempt(submission, trace):
                pass

    async def _attempt(self, submission: TaskSubmission, trace: TaskTrace) -> bool:
        """One attempt of a task; True when another attempt follows (after its backoff)."""
        task_id = submission.task_id
        attempt = self.journal.attempts.get(task_id, 0) + 1
        self.journal.attempts[task_id] = attempt
        if task_id in self._cancelled:
            await self._end(task_id, self.host.cancelled(task_id))
            trace.ended(TaskState.CANCELLED)
            return False
        if not await self.host.begin(task_id, attempt=attempt, worker=self.worker):
            self.journal.finished.add(task_id)
            return False
        trace.attempt(attempt)
        body = self._bodies[submission.tool]
        failure: TaskFailure | None = None
        try:
            result = await body(submission.arguments, _Scope(self, submission, attempt))
        except TaskCancelled:
            ended, report = TaskState.CANCELLED, self.host.cancelled(task_id)
        except TaskExpired:
            ended, report = TaskState.EXPIRED, self.host.expired(task_id)
        except Exception as exc:  # noqa: BLE001 - the runner's boundary: a body's failure
            failure = task_failure(exc)
            if failure.retryable and attempt < submission.max_attempts:
                delay = submission.retry_delay(attempt, failure.retry_after)
                retry_at = self._clock.now() + timedelta(seconds=delay)
                await self.host.retrying(
                    task_id, attempt=attempt, failure=failure, retry_at=retry_at
                )
                await self._sleep(delay)
                return True
            ended, report = TaskState.FAILED, self.host.failed(task_id, failure)
        else:
            ended, report = TaskState.SUCCEEDED, self.host.succeeded(task_id, result)
        await self._end(task_id, report)
        trace.ended(ended, failure)
        return False

    async def _end(self, task_id: str, report: Awaitable[None]) -> None:
        await report
        self.journal.finished.add(task_id)
        self._cancelled.discard(task_id)
