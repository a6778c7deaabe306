"""DBOS's process-wide state, kept here and nowhere else in Handrail.

DBOS is a singleton per process: one configuration, one system database, one registry
of workflow functions, background threads that poll queues. This module owns all of
it: the one generic workflow (`handrail_task`, registered when the module is imported),
the slot naming which function runs its bodies, and launch / shutdown. Everything
above it (`handrail.tasks.dbos`) is ordinary objects with explicit dependencies.

One engine at a time per process: `launch` refuses a second one until `shutdown`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from dbos import DBOS, SetWorkflowID, StepOptions, WorkflowStatus
from dbos._dbos import _get_dbos_instance
from dbos._error import (
    DBOSWorkflowCancelledError,
    DBOSWorkflowConflictIDError,
    DBOSWorkflowIDInUseError,
)
from dbos._utils import INTERNAL_QUEUE_NAME

__all__ = [
    "ACTIVE",
    "FINISHED",
    "NEVER_STARTED",
    "EngineConfig",
    "EngineQueue",
    "EngineStopped",
    "attempts_started",
    "cancel",
    "enqueue",
    "launch",
    "pending_elsewhere",
    "recover",
    "recover_one",
    "run_step",
    "shutdown",
    "shutdown_from_loop",
    "sleep",
    "status",
    "workflow_ids",
]

T = TypeVar("T")

WORKFLOW_NAME: Final = "handrail_task"
"""The one workflow function every task runs as; its argument is the submission's JSON."""

EngineStopped = (DBOSWorkflowCancelledError, DBOSWorkflowConflictIDError)
"""What DBOS raises into a workflow at a step boundary once this run must stop: it was
cancelled, or it no longer owns the workflow (cancelled, or taken over elsewhere)."""

NEVER_STARTED: Final = frozenset({"ENQUEUED", "DELAYED"})
ACTIVE: Final = frozenset({"PENDING"})
FINISHED: Final = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineQueue:
    """A DBOS queue and its limits (None: unlimited)."""

    name: str
    concurrency: int | None = None
    """Workflows of this queue running at once across every worker."""
    worker_concurrency: int | None = None
    """Workflows of this queue running at once on one worker."""
    poll_seconds: float = 0.05


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineConfig:
    """What DBOS is launched with in this process."""

    system_database_url: str
    worker_id: str
    """DBOS's executor id: a restarted worker of the same id recovers its own workflows."""
    application_version: str
    """Workers sharing queues must share it (DBOS recovers and dequeues by version)."""
    queues: tuple[EngineQueue, ...]
    listen: bool = True
    """Whether this process runs tasks from its queues, or only submits (a gate, a CLI)."""
    pool_size: int = 8
    """Connections this process may hold to the system database (DBOS's default is 20)."""
    app_name: str = "handrail"
    log_level: str = "WARNING"


_Runner = Callable[[str], Awaitable[None]]
_slot: dict[str, _Runner] = {}
"""The function running task bodies in this process (key "run"), set by `launch`."""


@DBOS.workflow(name=WORKFLOW_NAME)
async def _handrail_task(submission_json: str) -> None:
    run = _slot.get("run")
    if run is None:  # pragma: no cover - DBOS runs workflows only between launch and shutdown
        raise RuntimeError("a DBOS task ran with no DbosTaskRunner started in this process")
    await run(submission_json)


def _host_logging() -> None:
    """Send DBOS's log records through the host's logging configuration.

    Left alone, DBOS gives its logger a console handler bound to whatever `sys.stderr`
    is at its first launch; a library must not, and once that stream is closed (a test
    runner's capture, a CLI runner's buffer) every later launch fails flushing it. A
    handler present before the first launch keeps DBOS from adding its own.
    """
    engine_log = logging.getLogger("dbos")
    if not engine_log.handlers:
        engine_log.addHandler(logging.NullHandler())
        engine_log.propagate = True


def launch(config: EngineConfig, run: _Runner) -> None:
    """Create and launch DBOS for this process (blocking: migrations, threads)."""
    if "run" in _slot:
        raise RuntimeError("a DbosTaskRunner is already started in this process")
    _slot["run"] = run
    _host_logging()
    try:
        DBOS(
            config={
                "name": config.app_name,
                "system_database_url": config.system_database_url,
                "executor_id": config.worker_id,
                "application_version": config.application_version,
                "log_level": config.log_level,
                "sys_db_pool_size": config.pool_size,
            },
        )
        if not config.listen:
            DBOS.listen_queues([])
        DBOS.launch()
        for queue in config.queues:
            DBOS.register_queue(
                queue.name,
                global_concurrency=queue.concurrency,
                worker_concurrency=queue.worker_concurrency,
                polling_interval_sec=queue.poll_seconds,
                on_conflict="always_update",
            )
    except BaseException:
        shutdown()
        raise


def shutdown() -> None:
    """Stop DBOS in this process; running workflows are left to recovery."""
    _slot.pop("run", None)
    DBOS.destroy()


async def shutdown_from_loop() -> None:
    """`shutdown` from a coroutine, leaving this event loop a working default executor.

    DBOS makes its thread pool the default executor of every loop that awaits one of
    its calls, and `shutdown` closes that pool: without a new one, `asyncio.to_thread`
    would fail in this loop from then on (and so would a later `launch`).
    """
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=1) as own:
        await loop.run_in_executor(own, shutdown)
    loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="asyncio"))


def recover(worker_ids: Sequence[str]) -> list[str]:
    """Re-enqueue the unfinished workflows of (dead) workers; their ids.

    DBOS's own recovery by executor id (what Conductor calls): only workflows still
    owned by one of `worker_ids` move, so two adopters never both take one.
    """
    handles = DBOS._recover_pending_workflows(list(worker_ids))  # noqa: SLF001 - see docstring
    return [handle.workflow_id for handle in handles]


def recover_one(workflow_id: str, worker_id: str) -> bool:
    """Re-enqueue one PENDING workflow still owned by `worker_id`; False when it is not.

    The same guarded move as `recover`, for one workflow: DBOS changes the row only while
    it is PENDING under `worker_id`, and a re-enqueued workflow is started through the
    queue's atomic dequeue, so however many workers ask, one runs it.
    """
    system = _get_dbos_instance()._sys_db  # noqa: SLF001 - see docstring
    moved: bool = system.reenqueue_for_recovery(workflow_id, [worker_id], INTERNAL_QUEUE_NAME)
    return moved


async def pending_elsewhere(worker_id: str, application_version: str) -> list[tuple[str, str]]:
    """(workflow id, executor id) of the running task workflows of every other worker."""
    found = await DBOS.list_workflows_async(
        name=WORKFLOW_NAME,
        status=["PENDING"],
        app_version=application_version,
        load_input=False,
        load_output=False,
    )
    return [
        (entry.workflow_id, entry.executor_id)
        for entry in found
        if entry.executor_id is not None and entry.executor_id != worker_id
    ]


async def enqueue(queue: str, workflow_id: str, submission_json: str) -> bool:
    """Enqueue the task workflow under `workflow_id`; False when that id already existed."""
    try:
        with SetWorkflowID(workflow_id, workflow_id_reuse_policy="reject"):
            await DBOS.enqueue_workflow_async(queue, _handrail_task, submission_json)
    except DBOSWorkflowIDInUseError:
        return False
    return True


def _read_status(workflow_id: str) -> WorkflowStatus | None:
    # Without its input and output: the status row only (one indexed read).
    found = DBOS.list_workflows(workflow_ids=[workflow_id], load_input=False, load_output=False)
    return found[0] if found else None


async def _status_now(workflow_id: str) -> WorkflowStatus | None:
    # run_in_executor, unlike to_thread, does not copy the context: read from inside a
    # workflow, the status is read now, not recorded as a step and replayed later.
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, _read_status, workflow_id)


async def status(workflow_id: str) -> str | None:
    """DBOS's status string of a workflow (PENDING, ENQUEUED, SUCCESS...), None if unknown."""
    found = await _status_now(workflow_id)
    return None if found is None else found.status


async def attempts_started() -> int:
    """How many times DBOS has started the current workflow (1, then +1 per recovery)."""
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None  # noqa: S101 - only called inside the task workflow
    found = await _status_now(workflow_id)
    return 1 if found is None or found.recovery_attempts is None else found.recovery_attempts


async def workflow_ids(*, worker_ids: Sequence[str], statuses: Sequence[str]) -> list[str]:
    """Ids of the task workflows of these workers in these statuses."""
    found = await DBOS.list_workflows_async(
        name=WORKFLOW_NAME,
        executor_id=list(worker_ids),
        status=list(statuses),
        load_input=False,
        load_output=False,
    )
    return [entry.workflow_id for entry in found]


async def cancel(workflow_id: str) -> None:
    """Cancel a workflow: a queued one never starts; a running one stops at its next step."""
    await DBOS.cancel_workflow_async(workflow_id)


async def run_step(name: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Run `fn` as a checkpointed DBOS step; its result is normalised through JSON.

    On recovery DBOS returns the checkpoint instead of running `fn`; going through JSON
    on the first run too means both runs see the same value (lists, not tuples).
    """

    async def checkpointed() -> Any:  # noqa: ANN401 - a JSON value
        return json.loads(json.dumps(await fn()))

    options: StepOptions = {"name": name}
    result: T = await DBOS.run_step_async(options, checkpointed)
    return result


async def sleep(seconds: float) -> None:
    """A durable sleep inside the workflow (a recovered workflow sleeps only the rest)."""
    await DBOS.sleep_async(seconds)
