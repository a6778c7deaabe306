"""DbosTaskRunner refuses what it must not do: a second engine in one process, bodies
registered late or twice, unknown queues, work before start; and a body that breaks the
step rules (a name used twice, a result that is not JSON) fails its task, once.

On SQLite only: these are the runner's own rules, not the database's.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from _dbos_host import FileHost, script_body, wait_for_async
from _dbos_setup import submission

from handrail.errors import ErrorCode
from handrail.tasks.dbos import DbosTaskRunner, TaskQueue
from handrail.tasks.runner import TaskScope

pytestmark = pytest.mark.anyio


@pytest.fixture
def host(tmp_path: Path) -> FileHost:
    return FileHost(tmp_path / "facts.sqlite", worker="w1")


def _runner(host: FileHost, tmp_path: Path, worker: str = "w1") -> DbosTaskRunner:
    return DbosTaskRunner(
        host, system_database_url=f"sqlite:///{tmp_path / 'dbos.sqlite'}", worker_id=worker
    )


async def _twice(arguments: Mapping[str, Any], scope: TaskScope) -> Any:
    async def one() -> int:
        return 1

    await scope.step("same", one)
    return await scope.step("same", one)


async def _not_json(arguments: Mapping[str, Any], scope: TaskScope) -> Any:
    async def a_set() -> set[int]:
        return {1}

    return await scope.step("set", a_set)


@pytest.fixture
async def runner(host: FileHost, tmp_path: Path) -> AsyncIterator[DbosTaskRunner]:
    made = _runner(host, tmp_path)
    made.register("script", script_body(host))
    made.register("twice", _twice)
    made.register("not_json", _not_json)
    await made.start()
    try:
        yield made
    finally:
        await made.stop()


async def test_a_second_runner_in_one_process_is_refused(
    runner: DbosTaskRunner, host: FileHost, tmp_path: Path
) -> None:
    other = _runner(host, tmp_path / "..", worker="w2")
    with pytest.raises(RuntimeError, match="already started in this process"):
        await other.start()
    with pytest.raises(RuntimeError, match="already started"):
        await runner.start()


async def test_bodies_are_registered_once_and_before_start(
    runner: DbosTaskRunner, host: FileHost, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="before the runner starts"):
        runner.register("late", _twice)
    fresh = _runner(host, tmp_path)
    fresh.register("a", _twice)
    with pytest.raises(ValueError, match="already registered"):
        fresh.register("a", _twice)


async def test_nothing_is_done_before_start_or_on_an_unknown_queue(
    runner: DbosTaskRunner, host: FileHost, tmp_path: Path
) -> None:
    fresh = _runner(host, tmp_path)
    task = submission("t-x", [])
    with pytest.raises(RuntimeError, match="start the DbosTaskRunner first"):
        await fresh.submit(task)
    with pytest.raises(RuntimeError, match="start the DbosTaskRunner first"):
        await fresh.cancel("t-x")
    with pytest.raises(ValueError, match="unknown task queue"):
        await runner.submit(submission("t-x", [], queue="elsewhere"))
    await fresh.stop()  # never started: nothing to stop


async def test_a_runner_stopped_leaves_its_loop_working_and_may_start_again(
    host: FileHost, tmp_path: Path
) -> None:
    for _ in range(2):
        made = _runner(host, tmp_path)
        made.register("script", script_body(host))
        await made.start()
        task = submission(f"t-{made.worker_id}-{id(made)}", [{"name": "a"}])
        host.add(task)
        await made.submit(task)
        await wait_for_async(lambda t=task.task_id: host.state(t) == "succeeded", "done")
        await made.stop()
        await made.stop()  # a second stop is nothing
        assert await asyncio.to_thread(lambda: 42) == 42


async def test_the_engine_logs_through_the_host_and_survives_a_closed_stderr(
    host: FileHost, tmp_path: Path
) -> None:
    # A test runner or a CLI runner swaps sys.stderr for a buffer it closes afterwards;
    # an engine that bound its own console handler to it failed at the next launch.
    for _ in range(2):
        swapped = io.StringIO()
        made = _runner(host, tmp_path)
        with contextlib.redirect_stderr(swapped):
            await made.start()
        swapped.close()
        await made.stop()
    engine_log = logging.getLogger("dbos")
    assert engine_log.propagate
    assert not [h for h in engine_log.handlers if isinstance(h, logging.StreamHandler)]


def test_queues_must_be_named_and_distinct(host: FileHost, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    for queues in ((), (TaskQueue(name="a"), TaskQueue(name="a", concurrency=1))):
        with pytest.raises(ValueError, match="distinct names"):
            DbosTaskRunner(host, system_database_url=url, worker_id="w", queues=queues)


async def test_a_lease_must_be_positive_or_none_and_none_runs_without_beats(
    host: FileHost, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    for lease in (0.0, -1.0):
        with pytest.raises(ValueError, match="lease_seconds > 0"):
            DbosTaskRunner(host, system_database_url=url, worker_id="w", lease_seconds=lease)
    made = DbosTaskRunner(host, system_database_url=url, worker_id="w", lease_seconds=None)
    made.register("script", script_body(host))
    await made.start()
    try:
        task = submission("t-no-lease", [{"name": "a"}])
        host.add(task)
        await made.submit(task)
        await wait_for_async(lambda: host.state("t-no-lease") == "succeeded", "done")
    finally:
        await made.stop()


async def test_a_step_name_used_twice_fails_the_task_once(
    runner: DbosTaskRunner, host: FileHost
) -> None:
    task = submission("t-twice", [], max_attempts=3, tool="twice")
    host.add(task)
    await runner.submit(task)
    await wait_for_async(lambda: host.state("t-twice") == "failed", "failed")
    assert [e[3] for e in host.events("t-twice", "failed")] == [ErrorCode.FAILED_FINAL]
    assert len(host.events("t-twice", "begin")) == 1


async def test_a_step_result_that_is_not_json_fails_the_task(
    runner: DbosTaskRunner, host: FileHost
) -> None:
    task = submission("t-set", [], tool="not_json")
    host.add(task)
    await runner.submit(task)
    await wait_for_async(lambda: host.state("t-set") == "failed", "failed")
    assert [e[3] for e in host.events("t-set", "failed")] == [ErrorCode.FAILED_FINAL]


async def test_a_launch_that_fails_leaves_the_process_free_for_the_next(
    host: FileHost, tmp_path: Path
) -> None:
    broken = DbosTaskRunner(
        host,
        system_database_url=f"sqlite:///{tmp_path / 'missing' / 'dir' / 'dbos.sqlite'}",
        worker_id="w1",
    )
    with pytest.raises(Exception, match=r"(?i)unable to open|no such"):
        await broken.start()
    working = _runner(host, tmp_path)
    working.register("script", script_body(host))
    await working.start()
    await working.stop()
