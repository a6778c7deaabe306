"""`DbosTaskRunner`: the `TaskRunner` seam on DBOS durable workflows.

Every task is one DBOS workflow (`handrail_task`, in `_dbos_edge`) whose id is the task
id, so the same intent submitted twice is one workflow. It runs on a DBOS queue with
the limits given here (across workers, and per worker); each `scope.step` and
`scope.effect` is a DBOS step, checkpointed in the system database, so a worker killed
mid-task is replayed by another (`adopt=`, or on its own once the task's lease ran
out) or by itself restarted under the same `worker_id`, and resumes after its last
finished step. Retries of transient failures
run inside the workflow, with a durable sleep for the backoff; a finished step of an
earlier attempt is not run again. Every move is reported to Handrail's `TaskHost`.

SQLite (a file) is the default system database, for one worker process; PostgreSQL
for several. Install with the `tasks` extra (`dbos`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from handrail.clock import Clock, SystemClock
from handrail.errors import ConfigurationError, ErrorCode
from handrail.principal import Principal
from handrail.tasking import TaskState
from handrail.tasks import _dbos_edge as edge
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

__all__ = ["DbosTaskRunner", "TaskQueue"]

T = TypeVar("T")
TaskQueue = edge.EngineQueue
"""A queue tasks are submitted to, with its concurrency limits (all workers / one worker)."""

_log = logging.getLogger(__name__)
_DEFAULT_VERSION = "handrail-tasks-1"


class DbosTaskRunner:
    """Runs task bodies as DBOS workflows; one started instance per process.

    `worker_id` names this worker to DBOS (its executor id): a worker restarted under
    the same id takes its unfinished tasks back by itself; `adopt` names dead workers
    whose unfinished tasks this one takes over when it starts (or later, `adopt()`).
    With `listen=False` the process only submits and cancels (a gate or a CLI next to
    worker processes); it still takes recovered tasks (DBOS's recovery queue), so it
    registers the same bodies.

    Leases: while a body runs, its worker renews the task's lease every
    `lease_seconds / 3` (`TaskHost.heartbeat`, between steps too); every worker looks
    every `lease_seconds / 2` for RUNNING tasks whose holder let the lease run out,
    claims each on its record (compare-and-set: one claimant) and has DBOS re-enqueue
    it from the dead worker (one live worker dequeues it). `lease_seconds=None` turns
    this off; then only `adopt` and a restart under the same id recover.

    With `telemetry`, a submission carries its submitter's trace context in the
    workflow's input (so it survives the queue, a restart and a takeover), and every
    run of a task on a worker is a span under it (`handrail.tasks._telemetry`).
    """

    def __init__(
        self,
        host: TaskHost,
        *,
        system_database_url: str,
        worker_id: str,
        queues: Sequence[TaskQueue] = (TaskQueue(name="default"),),
        adopt: Sequence[str] = (),
        listen: bool = True,
        pool_size: int = 8,
        application_version: str = _DEFAULT_VERSION,
        clock: Clock | None = None,
        lease_seconds: float | None = 30.0,
        telemetry: Telemetry | None = None,
    ) -> None:
        if lease_seconds is not None and lease_seconds <= 0:
            raise ValueError("a task lease needs lease_seconds > 0 (or None: no takeover)")
        names = [queue.name for queue in queues]
        if not names or len(set(names)) != len(names):
            raise ValueError("a DbosTaskRunner needs one or more queues of distinct names")
        self._host = host
        self._config = edge.EngineConfig(
            system_database_url=system_database_url,
            worker_id=worker_id,
            application_version=application_version,
            queues=tuple(queues),
            listen=listen,
            pool_size=pool_size,
        )
        self._queues = frozenset(names)
        self._adopt = tuple(adopt)
        self._clock = clock or SystemClock()
        self._bodies: dict[str, TaskBody] = {}
        self._started = False
        self._lease = lease_seconds
        self._watcher: asyncio.Task[None] | None = None
        self._telemetry = telemetry

    @property
    def worker_id(self) -> str:
        """This worker's id (DBOS's executor id, and the lease holder in task records)."""
        return self._config.worker_id

    def register(self, tool: str, body: TaskBody) -> None:
        """Make `body` the body of tasks of `tool`; before `start`."""
        if self._started:
            raise RuntimeError("register task bodies before the runner starts")
        if tool in self._bodies:
            raise ValueError(f"a task body for {tool!r} is already registered")
        self._bodies[tool] = body

    async def start(self) -> None:
        """Launch DBOS in this process; recovers this worker's and adopted workers' tasks."""
        if self._started:
            raise RuntimeError("this DbosTaskRunner is already started")
        await asyncio.to_thread(edge.launch, self._config, self._run)
        self._started = True
        if self._adopt:
            await self.adopt(self._adopt)
        if self._lease is not None:
            self._watcher = asyncio.create_task(self._watch(self._lease))

    async def stop(self) -> None:
        """Shut DBOS down here; running bodies are left to recovery, not failed."""
        if self._started:
            self._started = False
            if self._watcher is not None:
                self._watcher.cancel()
                await asyncio.gather(self._watcher, return_exceptions=True)
                self._watcher = None
            await edge.shutdown_from_loop()

    async def adopt(self, worker_ids: Sequence[str]) -> list[str]:
        """Take over the unfinished tasks of dead workers; the ids of the tasks taken.

        A task such a worker was running when a cancellation came is recorded CANCELLED
        here: no worker will run it again to notice.
        """
        self._require_started()
        for task_id in await edge.workflow_ids(worker_ids=worker_ids, statuses=["CANCELLED"]):
            await self._host.cancelled(task_id)
        return await asyncio.to_thread(edge.recover, worker_ids)

    async def take_over_expired(self, lease_seconds: float) -> list[str]:
        """Take over running tasks of other workers whose lease ran out; their ids.

        Each is claimed on its record first (`TaskHost.take_over`), so of two live
        workers looking at once only one moves it; DBOS then re-enqueues it only while
        the dead worker still owns it. The watcher calls this every `lease_seconds / 2`.
        """
        self._require_started()
        version = self._config.application_version
        taken: list[str] = []
        for task_id, owner in await edge.pending_elsewhere(self.worker_id, version):
            holder = await self._host.take_over(
                task_id, worker=self.worker_id, lease_seconds=lease_seconds
            )
            if holder is None:
                continue
            moved = await asyncio.to_thread(edge.recover_one, task_id, owner)
            _log.warning(
                "task %s: lease of %s ran out; worker %s took it over from executor %s%s",
                task_id,
                holder,
                self.worker_id,
                owner,
                "" if moved else " (DBOS had already moved it)",
            )
            taken.append(task_id)
        return taken

    async def _watch(self, lease_seconds: float) -> None:
        while True:
            await asyncio.sleep(lease_seconds / 2)
            try:
                await self.take_over_expired(lease_seconds)
            except Exception:  # noqa: BLE001 - a failed look is retried at the next one
                _log.exception("looking for tasks whose lease ran out failed")

    async def submit(self, submission: TaskSubmission) -> bool:
        """Enqueue the task under its id; False when a task of that id existed (one task)."""
        self._require_started()
        if submission.queue not in self._queues:
            raise ValueError(f"unknown task queue {submission.queue!r}")
        if submission.tool not in self._bodies:
            raise ValueError(f"no task body registered for tool {submission.tool!r}")
        if self._telemetry is not None:
            submission = stamped(submission)
        return await edge.enqueue(submission.queue, submission.task_id, submission.to_json())

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task; True when it was not yet finished.

        A queued task never runs and is recorded CANCELLED here; a running one stops at
        its next step boundary and its worker records it.
        """
        self._require_started()
        before = await edge.status(task_id)
        if before is None or before in edge.FINISHED:
            return False
        await edge.cancel(task_id)
        if before in edge.NEVER_STARTED:
            await self._host.cancelled(task_id)
        return True

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("start the DbosTaskRunner first")

    # --- inside the workflow (on DBOS's event loop) --------------------------------------

    async def _run(self, submission_json: str) -> None:
        submission = TaskSubmission.from_json(submission_json)
        with task_trace(self._telemetry, submission) as trace:
            await self._attempts(submission, trace)

    async def _attempts(self, submission: TaskSubmission, trace: TaskTrace) -> None:
        host, task_id = self._host, submission.task_id
        body = self._bodies.get(submission.tool)
        if body is None:  # a worker deployed without this tool: fail it, loudly
            _log.error("task %s: no body registered for tool %r", task_id, submission.tool)
            failure = TaskFailure(code=ErrorCode.FAILED_FINAL, retryable=False)
            await host.failed(task_id, failure)
            trace.ended(TaskState.FAILED, failure)
            return
        run = _Execution()
        beating = None
        if self._lease is not None:  # a fresh context: the beats are no DBOS operations
            beats = self._beat(task_id, self._lease / 3)
            beating = asyncio.create_task(beats, context=contextvars.Context())
        try:
            for index in range(1, submission.max_attempts + 1):
                scope = _Scope(self, submission, index, run)
                attempt = scope.attempt
                if not await host.begin(task_id, attempt=attempt, worker=self.worker_id):
                    return
                trace.attempt(attempt)
                try:
                    result = await body(submission.arguments, scope)
                except (TaskCancelled, TaskExpired):
                    raise
                except Exception as exc:  # noqa: BLE001 - classified by the one rule
                    failure = task_failure(exc)
                    if not failure.retryable or index == submission.max_attempts:
                        _log.info("task %s failed: %r", task_id, exc)
                        await host.failed(task_id, failure)
                        trace.ended(TaskState.FAILED, failure)
                        return
                    delay = submission.retry_delay(index, failure.retry_after)
                    retry_at = self._clock.now() + timedelta(seconds=delay)
                    await host.retrying(
                        task_id, attempt=attempt, failure=failure, retry_at=retry_at
                    )
                    await edge.sleep(delay)
                    continue
                await host.succeeded(task_id, result)
                trace.ended(TaskState.SUCCEEDED)
                return
        except TaskExpired:
            await host.expired(task_id)
            trace.ended(TaskState.EXPIRED)
        except TaskCancelled:
            await host.cancelled(task_id)
            trace.ended(TaskState.CANCELLED)
        except edge.EngineStopped:
            # Cancelled in DBOS (by `cancel`), or this run lost the workflow to another
            # worker, which reports it from now on. DBOS keeps the workflow's own state.
            if await edge.status(task_id) == "CANCELLED":
                await host.cancelled(task_id)
                trace.ended(TaskState.CANCELLED)
            raise
        finally:
            if beating is not None:
                beating.cancel()
                await asyncio.gather(beating, return_exceptions=True)

    async def _beat(self, task_id: str, every: float) -> None:
        """Renew this worker's lease on `task_id` until cancelled (the attempt ended)."""
        while True:
            await asyncio.sleep(every)
            try:  # False (the lease is elsewhere) only matters to whoever holds it now
                held = await self._host.heartbeat(task_id, worker=self.worker_id)
                _log.debug(
                    "task %s: heartbeat of %s, lease held: %s", task_id, self.worker_id, held
                )
            except Exception:  # noqa: BLE001 - a failed beat is retried at the next one
                _log.exception("task %s: heartbeat failed", task_id)


class _Execution:
    """One run of a task's workflow in this process, across its attempts.

    `finished` holds the results of the steps finished so far (a retry returns them
    instead of running the step again). `recovered` is how many times DBOS started
    this workflow before this run: unknown (None, taken as 0) until a step comes back
    from its checkpoint instead of running, which only a re-run sees; it is read from
    DBOS then, once, so a first run pays no read for it. A recovered run that finds no
    finished step counts as a first run again: nothing of the earlier one was kept.
    """

    def __init__(self) -> None:
        self.finished: dict[str, Any] = {}
        self.recovered: int | None = None


class _Scope:
    """One attempt's `TaskScope`: DBOS steps, checked at every boundary."""

    def __init__(
        self,
        runner: DbosTaskRunner,
        submission: TaskSubmission,
        index: int,
        run: _Execution,
    ) -> None:
        self._runner = runner
        self._submission = submission
        self._index = index
        self._run = run
        self._names: set[str] = set()

    @property
    def task_id(self) -> str:
        """The task's id (the DBOS workflow id)."""
        return self._submission.task_id

    @property
    def principal(self) -> Principal:
        """Who the task runs as, from the submission's snapshot."""
        return self._submission.caller()

    @property
    def attempt(self) -> int:
        """1 for the first attempt; retries and recoveries count up."""
        return self._index + (self._run.recovered or 0)

    async def step(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn` once as a checkpointed DBOS step named `name`."""
        return await self._once(name, fn)

    async def effect(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run an external write through the host's execution record, as a step."""
        host, submission = self._runner._host, self._submission  # noqa: SLF001 - one unit

        async def through_record() -> T:
            return await host.effect(submission, name, fn)

        return await self._once(name, through_record)

    async def progress(self, fraction: float, message: str | None = None) -> None:
        """Check for cancellation and expiry, then store progress (a heartbeat too)."""
        await self._boundary()
        await self._runner._host.progress(  # noqa: SLF001 - one unit
            self.task_id, fraction, message, worker=self._runner.worker_id
        )

    async def _once(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        if name in self._names:
            raise ConfigurationError(f"step name {name!r} is used twice in one task")
        self._names.add(name)
        if name in self._run.finished:  # finished in an earlier attempt: never again
            done: T = self._run.finished[name]
            return done
        await self._boundary()
        ran = False

        async def tracked() -> T:
            nonlocal ran
            ran = True
            return await fn()

        try:
            result = await edge.run_step(name, tracked)
        except Exception:
            if not ran:  # a failure replayed from the checkpoint
                await self._replayed()
            raise
        if not ran:
            await self._replayed()
        self._run.finished[name] = result
        return result

    async def _replayed(self) -> None:
        """A step came back from its checkpoint: learn how often DBOS ran this before."""
        if self._run.recovered is not None:
            return
        self._run.recovered = await edge.attempts_started() - 1
        if self._run.recovered:
            await self._runner._host.begin(  # noqa: SLF001 - one unit
                self.task_id, attempt=self.attempt, worker=self._runner.worker_id
            )

    async def _boundary(self) -> None:
        await self._runner._host.checkpoint(  # noqa: SLF001 - one unit
            self.task_id, worker=self._runner.worker_id
        )
