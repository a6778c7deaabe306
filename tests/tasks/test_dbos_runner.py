"""DbosTaskRunner in one process, on SQLite and on PostgreSQL: one task per intent,
cancellation at a step boundary, expiry, retries with backoff, failures once.

DBOS runs in this process (its singleton), started and stopped around every test. The
scripted body notes every step entry and effect in a file outside the engine
(`_dbos_host`); the tests wait for those facts, never for time to pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _dbos_host import WAIT_S, FileHost, release, script_body, wait_for_async
from _dbos_setup import submission

from handrail.clock import FixedClock
from handrail.errors import ErrorCode
from handrail.tasks import _dbos_edge as edge
from handrail.tasks.dbos import DbosTaskRunner, TaskQueue

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def host(tmp_path: Path, clock: FixedClock) -> FileHost:
    return FileHost(tmp_path / "facts.sqlite", clock=clock, worker="w1")


@pytest.fixture
async def runner(dbos_url: str, host: FileHost, clock: FixedClock) -> AsyncIterator[DbosTaskRunner]:
    made = DbosTaskRunner(
        host,
        system_database_url=dbos_url,
        worker_id="w1",
        queues=(TaskQueue(name="default"), TaskQueue(name="single", worker_concurrency=1)),
        clock=clock,
    )
    made.register("script", script_body(host))
    await made.start()
    try:
        yield made
    finally:
        await made.stop()


async def _state(host: FileHost, task_id: str, state: str) -> None:
    await wait_for_async(lambda: host.state(task_id) == state, f"{task_id} {state}")


async def _engine_status(task_id: str, status: str) -> None:
    end = asyncio.get_running_loop().time() + WAIT_S
    while await edge.status(task_id) != status:
        assert asyncio.get_running_loop().time() < end, f"DBOS never said {task_id} {status}"
        await asyncio.sleep(0.02)


async def test_the_same_intent_submitted_twice_is_one_task(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    task = submission("t-same", [{"name": "a", "effect": True}], now=clock.now())
    host.add(task)
    assert await runner.submit(task) is True
    assert await runner.submit(task) is False
    await _state(host, "t-same", "succeeded")
    racing = await asyncio.gather(*(runner.submit(task) for _ in range(4)))
    assert racing == [False] * 4
    assert host.effects("t-same") == ["a"]
    assert [e[0] for e in host.events("t-same", "begin")] == ["begin"]


async def test_two_racing_first_submissions_create_one_task(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    task = submission("t-race", [{"name": "a", "effect": True}], now=clock.now())
    host.add(task)
    created = await asyncio.gather(*(runner.submit(task) for _ in range(6)))
    assert sorted(created) == [False] * 5 + [True]
    await _state(host, "t-race", "succeeded")
    assert host.effects("t-race") == ["a"]


async def test_a_task_runs_its_steps_once_and_reports_its_result(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    steps = [{"name": "a"}, {"name": "b", "effect": True}]
    task = submission("t-ok", steps, now=clock.now())
    host.add(task)
    await runner.submit(task)
    await _state(host, "t-ok", "succeeded")
    assert host.runs("t-ok") == [("a", "w1"), ("b", "w1")]
    (detail,) = [e[3] for e in host.events("t-ok", "succeeded")]
    assert '"step": "b"' in detail
    await _engine_status("t-ok", "SUCCESS")


async def test_cancel_while_running_stops_at_the_next_step_boundary(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock, tmp_path: Path
) -> None:
    steps = [{"name": "a", "wait": True}, {"name": "b", "effect": True}, {"name": "c"}]
    task = submission("t-cancel", steps, now=clock.now())
    host.add(task)
    await runner.submit(task)
    await wait_for_async(lambda: host.runs("t-cancel") == [("a", "w1")], "step a running")
    assert await runner.cancel("t-cancel") is True
    release(tmp_path, "t-cancel", "a")
    await _state(host, "t-cancel", "cancelled")
    await _engine_status("t-cancel", "CANCELLED")
    assert host.runs("t-cancel") == [("a", "w1")]
    assert host.effects("t-cancel") == []
    assert host.events("t-cancel", "succeeded") == []
    assert await runner.cancel("t-cancel") is False


async def test_a_queued_task_cancelled_never_runs(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock, tmp_path: Path
) -> None:
    blocker = submission("t-block", [{"name": "a", "wait": True}], now=clock.now(), queue="single")
    queued = submission(
        "t-queued", [{"name": "a", "effect": True}], now=clock.now(), queue="single"
    )
    after = submission("t-after", [{"name": "a"}], now=clock.now(), queue="single")
    for task in (blocker, queued, after):
        host.add(task)
    await runner.submit(blocker)
    await wait_for_async(lambda: host.runs("t-block") == [("a", "w1")], "blocker running")
    await runner.submit(queued)
    await runner.submit(after)
    assert await edge.status("t-queued") == "ENQUEUED"
    assert await runner.cancel("t-queued") is True
    assert host.state("t-queued") == "cancelled"
    release(tmp_path, "t-block", "a")
    # The queue runs one at a time, in order: once the later task is done, the cancelled
    # one was passed over.
    await _state(host, "t-after", "succeeded")
    assert host.runs("t-queued") == []
    assert host.events("t-queued", "begin") == []


async def test_cancel_of_an_unknown_or_finished_task_is_false(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    assert await runner.cancel("t-nobody") is False
    task = submission("t-done", [{"name": "a"}], now=clock.now())
    host.add(task)
    await runner.submit(task)
    await _engine_status("t-done", "SUCCESS")
    assert await runner.cancel("t-done") is False
    assert host.state("t-done") == "succeeded"


async def test_an_expired_task_stops_at_the_next_step_boundary(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock, tmp_path: Path
) -> None:
    steps = [{"name": "a", "wait": True}, {"name": "b", "effect": True}]
    task = submission("t-expire", steps, now=clock.now(), expires_in=60.0)
    host.add(task)
    await runner.submit(task)
    await wait_for_async(lambda: host.runs("t-expire") == [("a", "w1")], "step a running")
    clock.advance(61.0)
    release(tmp_path, "t-expire", "a")
    await _state(host, "t-expire", "expired")
    assert host.runs("t-expire") == [("a", "w1")]
    assert host.effects("t-expire") == []
    assert host.events("t-expire", "succeeded") == []


async def test_a_task_expired_before_it_starts_runs_no_step(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    task = submission("t-late", [{"name": "a", "effect": True}], now=clock.now(), expires_in=1.0)
    host.add(task)
    clock.advance(2.0)
    await runner.submit(task)
    await _state(host, "t-late", "expired")
    await _engine_status("t-late", "SUCCESS")
    assert host.runs("t-late") == []


async def test_a_transient_error_is_retried_with_backoff_and_finished_steps_are_kept(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    steps = [{"name": "a", "effect": True}, {"name": "b", "transient": [1, 2]}, {"name": "c"}]
    task = submission("t-retry", steps, now=clock.now(), max_attempts=3, backoff_seconds=0.01)
    host.add(task)
    await runner.submit(task)
    await _state(host, "t-retry", "succeeded")
    assert [e[1] for e in host.events("t-retry", "begin")] == [1, 2, 3]
    retries = [(e[1], e[3]) for e in host.events("t-retry", "retrying")]
    assert retries == [(1, '["TRANSIENT", 0.01]'), (2, '["TRANSIENT", 0.02]')]
    # Step a finished in attempt 1 and is never run again; b runs once per attempt.
    assert [name for name, _ in host.runs("t-retry")] == ["a", "b", "b", "b", "c"]
    assert host.effects("t-retry") == ["a"]


async def test_a_transient_error_on_every_attempt_fails_once_after_the_last(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    steps = [{"name": "a", "transient": [1, 2]}]
    task = submission("t-tired", steps, now=clock.now(), max_attempts=2)
    host.add(task)
    await runner.submit(task)
    await _state(host, "t-tired", "failed")
    assert [e[1] for e in host.events("t-tired", "begin")] == [1, 2]
    assert [e[3] for e in host.events("t-tired", "failed")] == [ErrorCode.TRANSIENT]
    assert len(host.events("t-tired", "retrying")) == 1


async def test_a_final_error_fails_once_without_a_retry(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    steps = [{"name": "a", "effect": True}, {"name": "b", "final": True}, {"name": "c"}]
    task = submission("t-final", steps, now=clock.now(), max_attempts=5)
    host.add(task)
    await runner.submit(task)
    await _state(host, "t-final", "failed")
    assert [e[3] for e in host.events("t-final", "failed")] == [ErrorCode.FAILED_FINAL]
    assert len(host.events("t-final", "begin")) == 1
    assert host.events("t-final", "retrying") == []
    assert [name for name, _ in host.runs("t-final")] == ["a", "b"]


async def test_a_cancel_recorded_by_handrail_alone_stops_the_task_at_its_next_step(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock, tmp_path: Path
) -> None:
    # The cancel_task tool or the CLI in another process marks the record; the worker
    # notices at its next boundary without the engine being told.
    steps = [{"name": "a", "wait": True}, {"name": "b", "effect": True}]
    task = submission("t-marked", steps, now=clock.now())
    host.add(task)
    await runner.submit(task)
    await wait_for_async(lambda: host.runs("t-marked") == [("a", "w1")], "step a running")
    host.request_cancel("t-marked")
    release(tmp_path, "t-marked", "a")
    await _state(host, "t-marked", "cancelled")
    assert host.runs("t-marked") == [("a", "w1")]
    assert host.effects("t-marked") == []


async def test_a_worker_stopped_mid_task_is_adopted_in_this_process(
    dbos_url: str, host: FileHost, clock: FixedClock, tmp_path: Path
) -> None:
    def runner_as(worker: str, adopt: tuple[str, ...] = ()) -> DbosTaskRunner:
        made = DbosTaskRunner(
            host, system_database_url=dbos_url, worker_id=worker, adopt=adopt, clock=clock
        )
        made.register("script", script_body(host))
        return made

    first = runner_as("w1")
    await first.start()
    try:
        steps = [{"name": "a", "effect": True}, {"name": "b", "wait": True}]
        for task_id in ("t-left", "t-left-cancelled"):
            task = submission(task_id, steps, now=clock.now())
            host.add(task)
            await first.submit(task)
            await wait_for_async(lambda t=task_id: len(host.runs(t)) == 2, f"{task_id} in b")
        retried = submission(
            "t-left-retried",
            [{"name": "a", "transient": [1]}, {"name": "b", "wait": True}],
            now=clock.now(),
            max_attempts=3,
        )
        host.add(retried)
        await first.submit(retried)
        await wait_for_async(lambda: len(host.runs("t-left-retried")) == 3, "retried in b")
    finally:
        await first.stop()
    second = runner_as("w2")
    await second.start()
    try:
        # Cancelled while no worker runs it: nobody would notice but the adopter.
        assert await second.cancel("t-left-cancelled") is True
        assert host.state("t-left-cancelled") == "running"
        adopted = await second.adopt(["w1"])
        assert sorted(adopted) == ["t-left", "t-left-retried"]
        assert host.state("t-left-cancelled") == "cancelled"
        await wait_for_async(lambda: len(host.runs("t-left")) == 3, "b resumed")
        release(tmp_path, "t-left", "b")
        await _state(host, "t-left", "succeeded")
        await wait_for_async(lambda: len(host.runs("t-left-retried")) == 4, "retried b again")
        release(tmp_path, "t-left-retried", "b")
        await _state(host, "t-left-retried", "succeeded")
        assert await second.adopt(["w1"]) == []
    finally:
        await second.stop()
    # The replayed failure of attempt 1 told w2 this is a recovery: attempts 2, then 3.
    assert [e[1] for e in host.events("t-left-retried", "begin")] == [1, 2, 1, 2, 3]
    assert [name for name, _ in host.runs("t-left-retried")] == ["a", "a", "b", "b"]
    assert [name for name, _ in host.runs("t-left")] == ["a", "b", "b"]
    assert host.effects("t-left") == ["a"]
    assert [e[1] for e in host.events("t-left", "begin")] == [1, 1, 2]


async def test_a_task_of_a_tool_this_worker_lacks_fails_once(
    runner: DbosTaskRunner, host: FileHost, clock: FixedClock
) -> None:
    task = submission("t-lost", [], now=clock.now(), tool="nobody")
    host.add(task)
    with pytest.raises(ValueError, match="no task body registered"):
        await runner.submit(task)
    # A submitting process that knows the tool while this worker does not.
    assert await edge.enqueue("default", "t-lost", task.to_json()) is True
    await _state(host, "t-lost", "failed")
    assert [e[3] for e in host.events("t-lost", "failed")] == [ErrorCode.FAILED_FINAL]


class _FlakyHost(FileHost):
    """A FileHost whose first heartbeat and first takeover look fail (both are retried)."""

    def __init__(self, path: Path, *, clock: FixedClock) -> None:
        super().__init__(path, clock=clock, worker="w1")
        self.failures = {"heartbeat", "take_over"}

    def _flake(self, name: str) -> None:
        if name in self.failures:
            self.failures.discard(name)
            raise OSError(f"{name} failed once")

    async def heartbeat(self, task_id: str, *, worker: str) -> bool:
        self._flake("heartbeat")
        return await super().heartbeat(task_id, worker=worker)

    async def take_over(self, task_id: str, *, worker: str, lease_seconds: float) -> str | None:
        self._flake("take_over")
        return await super().take_over(task_id, worker=worker, lease_seconds=lease_seconds)


async def test_a_stopped_workers_task_is_taken_over_once_its_lease_ran_out_on_the_clock(
    dbos_url: str, clock: FixedClock, tmp_path: Path
) -> None:
    # Beats and looks come often (real time); the lease runs out only when the injected
    # clock is moved on, so nothing is taken over before the test says so.
    host = _FlakyHost(tmp_path / "facts.sqlite", clock=clock)

    def runner_as(worker: str) -> DbosTaskRunner:
        made = DbosTaskRunner(
            host, system_database_url=dbos_url, worker_id=worker, clock=clock, lease_seconds=0.3
        )
        made.register("script", script_body(host))
        return made

    first = runner_as("w1")
    await first.start()
    try:
        task = submission("t-lease", [{"name": "a", "effect": True}, {"name": "b", "wait": True}])
        host.add(task)
        await first.submit(task)
        await wait_for_async(lambda: len(host.runs("t-lease")) == 2, "b running")
        await wait_for_async(lambda: bool(host.events("t-lease", "heartbeat")), "a heartbeat")
    finally:
        await first.stop()
    second = runner_as("w2")
    await second.start()
    try:
        await wait_for_async(lambda: bool(host.events("t-lease", "lease-check")), "w2 looked")
        assert (host.events("t-lease", "takeover"), len(host.runs("t-lease"))) == ([], 2)
        clock.advance(1.0)
        await wait_for_async(lambda: len(host.runs("t-lease")) == 3, "b taken over")
        assert await second.take_over_expired(0.3) == []  # w2 holds it now
        release(tmp_path, "t-lease", "b")
        await _state(host, "t-lease", "succeeded")
    finally:
        await second.stop()
    assert [e[3] for e in host.events("t-lease", "takeover")] == ["w1"]
    assert host.query("SELECT worker FROM records WHERE task_id = 't-lease'") == [("w2",)]
    assert host.effects("t-lease") == ["a"]
    assert host.failures == set()
