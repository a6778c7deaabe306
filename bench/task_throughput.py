"""Tasks per second through DbosTaskRunner, against DBOS's own bare workflow, same run.

Timed: N no-op tasks submitted and completed. Handrail's path: `DbosTaskRunner.submit`
of a `TaskSubmission` whose body runs one `scope.step` of a no-op (the runner's whole
path: the generic workflow, `TaskHost.begin`, a checkpoint, the DBOS step, `succeeded`);
the host is a no-op, so what is measured is the runner over the engine, not the task
record's store. Baseline: DBOS's own workflow with the same one step (`DBOS.run_step_async`
of the same no-op), enqueued with `DBOS.enqueue_workflow_async` under an id of ours on a
queue with the same settings, in the same DBOS instance of every process.

Processes: this one submits (a runner with `listen=False`, as a gate would) and W
worker processes (multiprocessing 'spawn') run the tasks of both paths. Backends: a
SQLite file, and PostgreSQL (a scratch database created for the run and dropped after,
unless --pg-url names one). A sample submits N tasks at once (asyncio.gather) and ends
when DBOS lists all N as SUCCESS (polled every 10 ms, alike for both paths); its
throughput is N over that wall time. Rounds alternate the paths, the order flipping
every round. Every sample checks that each task's body (or bare workflow) ran exactly
once. Submit→RUNNING: wall-clock delay from the submit call to the first line of the
body (of the bare workflow): p50 and p99 of --latency tasks per path submitted one at a
time on idle workers (each waited for before the next), alternating the paths; the same
delays inside the bursts are in the JSON ("burst_latency_ms"), where they mostly measure
the queue's backlog.

Reported: median tasks/s per path, the median of same-round ratios handrail / bare
against the target (>= 0.80), and the latencies. Nothing here asserts a time.

    .venv/bin/python bench/task_throughput.py                  # sqlite + postgres, 1 and 4
    .venv/bin/python bench/task_throughput.py --backends sqlite --workers 1 --json out.json
    .venv/bin/python bench/task_throughput.py --smoke           # tiny sizes, seconds
"""

# NullHost implements the TaskHost protocol and ignores what it is told, by design.
# ruff: noqa: ARG002

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import queue
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from _measure import environment_facts, same_round_ratio, summary, table
from dbos import DBOS, SetWorkflowID
from psycopg import sql

from handrail.principal import Principal
from handrail.tasks.dbos import DbosTaskRunner, TaskQueue
from handrail.tasks.runner import TaskFailure, TaskHost, TaskScope, TaskSubmission

T = TypeVar("T")

HANDRAIL = "handrail"
BARE = "bare"
PATHS = (HANDRAIL, BARE)
TARGET_RATIO = 0.80
TOOL = "noop"
QUEUES = (
    TaskQueue(name="bench-handrail", poll_seconds=0.01),
    TaskQueue(name="bench-bare", poll_seconds=0.01),
)
PG = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
START_S = 120.0
SAMPLE_S = 600.0
PRINCIPAL = Principal(user_id="bench", tenant_id="bench")

_latencies: list[Any] = []
"""This worker process's channel for (path, seconds) samples (set in `_worker`)."""


# --- what runs --------------------------------------------------------------------------------


async def _nothing() -> None:
    return None


def _report(path: str, submitted: float) -> None:
    _latencies[0].put((path, time.time() - submitted))


async def noop_body(arguments: Mapping[str, Any], scope: TaskScope) -> None:
    """The task under test: note when it started, then one no-op step."""
    _report(HANDRAIL, arguments["t"])
    await scope.step("noop", _nothing)


@DBOS.workflow(name="bench_bare_noop")
async def bare_noop(submitted: float) -> None:
    """The baseline: DBOS's own workflow with the same one step."""
    _report(BARE, submitted)
    await DBOS.run_step_async({"name": "noop"}, _nothing)


class NullHost:
    """A TaskHost that keeps nothing: the runner is measured, not the task record."""

    async def begin(self, task_id: str, *, attempt: int, worker: str) -> bool:
        return True

    async def checkpoint(self, task_id: str, *, worker: str) -> None:
        return None

    async def heartbeat(self, task_id: str, *, worker: str) -> bool:
        return True

    async def take_over(self, task_id: str, *, worker: str, lease_seconds: float) -> str | None:
        return None

    async def progress(
        self, task_id: str, fraction: float, message: str | None, *, worker: str
    ) -> None:
        return None

    async def retrying(
        self, task_id: str, *, attempt: int, failure: TaskFailure, retry_at: datetime
    ) -> None:
        return None

    async def succeeded(self, task_id: str, result: Any) -> None:
        return None

    async def failed(self, task_id: str, failure: TaskFailure) -> None:
        return None

    async def cancelled(self, task_id: str) -> None:
        return None

    async def expired(self, task_id: str) -> None:
        return None

    async def effect(
        self, submission: TaskSubmission, name: str, fn: Callable[[], Awaitable[T]]
    ) -> T:
        return await fn()


def _runner(url: str, worker: str, *, listen: bool) -> DbosTaskRunner:
    host: TaskHost = NullHost()  # the seam, checked by tests/bench and mypy
    runner = DbosTaskRunner(
        host, system_database_url=url, worker_id=worker, queues=QUEUES, listen=listen
    )
    runner.register(TOOL, noop_body)
    return runner


# --- worker processes -------------------------------------------------------------------------


def _worker(url: str, name: str, latencies: Any, ready: Event, stop: Event) -> None:
    """A worker process: runs both paths' tasks until told to stop."""
    _latencies.append(latencies)

    async def serve() -> None:
        runner = _runner(url, name, listen=True)
        await runner.start()
        ready.set()
        await asyncio.to_thread(stop.wait)
        await runner.stop()

    asyncio.run(serve())


@contextmanager
def _workers(url: str, count: int, latencies: Any) -> Iterator[None]:
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    started: list[tuple[BaseProcess, Event]] = []
    try:
        for index in range(count):
            ready = context.Event()
            process = context.Process(
                target=_worker, args=(url, f"bench-w{index}", latencies, ready, stop), daemon=True
            )
            process.start()
            started.append((process, ready))
        for process, ready in started:
            assert ready.wait(START_S), f"worker {process.name} did not start"
        yield
    finally:
        stop.set()
        for process, _ in started:
            process.join(START_S)
            if process.is_alive():
                process.kill()
                process.join(START_S)


# --- one sample -------------------------------------------------------------------------------


def _submission(task_id: str) -> TaskSubmission:
    now = datetime.now(UTC)
    return TaskSubmission(
        task_id=task_id,
        intent_key=task_id,
        tenant_id=PRINCIPAL.tenant_id,
        tool=TOOL,
        arguments={"t": time.time()},
        principal=PRINCIPAL.snapshot(),
        queue=QUEUES[0].name,
        max_attempts=1,
        backoff_seconds=0.0,
        max_backoff_seconds=0.0,
        submitted_at=now,
        expires_at=now + timedelta(hours=1),
    )


async def _bare_enqueue(task_id: str) -> None:
    with SetWorkflowID(task_id):
        await DBOS.enqueue_workflow_async(QUEUES[1].name, bare_noop, time.time())


async def _succeeded(prefix: str) -> int:
    found = await DBOS.list_workflows_async(
        workflow_id_prefix=prefix, status="SUCCESS", load_input=False, load_output=False
    )
    return len(found)


def _drain(latencies: Any, n: int) -> list[tuple[str, float]]:
    got: list[tuple[str, float]] = []
    end = time.monotonic() + SAMPLE_S
    while len(got) < n:
        try:
            got.append(latencies.get(timeout=max(0.0, end - time.monotonic())))
        except queue.Empty:
            break
    return got


async def sample(
    runner: DbosTaskRunner, path: str, prefix: str, n: int, latencies: Any
) -> tuple[float, list[float]]:
    """Submit n tasks of `path` at once and wait for all; (tasks/s, latencies)."""
    ids = [f"{prefix}{i:06d}" for i in range(n)]
    start = time.perf_counter()
    if path == HANDRAIL:
        created = await asyncio.gather(*(runner.submit(_submission(i)) for i in ids))
        assert all(created)
    else:
        await asyncio.gather(*(_bare_enqueue(i) for i in ids))
    end = time.monotonic() + SAMPLE_S
    while await _succeeded(prefix) < n:
        assert time.monotonic() < end, f"{path}: {n} tasks not done within {SAMPLE_S} s"
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - start
    got = _drain(latencies, n)
    assert [p for p, _ in got] == [path] * n, f"{path}: a body ran {len(got)} times for {n}"
    assert latencies.empty(), f"{path}: a body ran more than once"
    return n / elapsed, [seconds for _, seconds in got]


# --- a configuration --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One backend and worker count: both paths' numbers."""

    backend: str
    workers: int
    tasks_per_round: int
    handrail_tasks_s: float
    bare_tasks_s: float
    ratio: float
    target: float
    latency_ms: dict[str, dict[str, float]]
    burst_latency_ms: dict[str, dict[str, float]]
    rounds: dict[str, list[float]]


def _percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000


def _percentiles(delays: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        path: {"p50": round(_percentile(d, 50), 1), "p99": round(_percentile(d, 99), 1)}
        for path, d in delays.items()
    }


async def idle_latencies(
    runner: DbosTaskRunner, prefix: str, count: int, latencies: Any
) -> dict[str, list[float]]:
    """Submit→RUNNING of `count` tasks per path, one at a time, alternating the paths."""
    delays: dict[str, list[float]] = {HANDRAIL: [], BARE: []}
    for index in range(count):
        for path in PATHS if index % 2 == 0 else PATHS[::-1]:
            _, seconds = await sample(runner, path, f"{prefix}{path}-{index}-", 1, latencies)
            delays[path].extend(seconds)
    return delays


async def configuration(
    runner: DbosTaskRunner, url: str, backend: str, workers: int, args: argparse.Namespace
) -> Row:
    """Warm up, then `rounds` rounds of both paths with `workers` worker processes."""
    latencies = multiprocessing.get_context("spawn").Queue()
    run = uuid.uuid4().hex[:8]
    rates: dict[str, list[float]] = {HANDRAIL: [], BARE: []}
    delays: dict[str, list[float]] = {HANDRAIL: [], BARE: []}
    with _workers(url, workers, latencies):
        for path in PATHS:
            await sample(runner, path, f"{run}-warm-{path}-", args.warmup, latencies)
        for index in range(args.rounds):
            order = PATHS if index % 2 == 0 else PATHS[::-1]
            for path in order:
                prefix = f"{run}-{index}-{path}-"
                rate, seconds = await sample(runner, path, prefix, args.tasks, latencies)
                rates[path].append(rate)
                delays[path].extend(seconds)
        idle = await idle_latencies(runner, f"{run}-idle-", args.latency, latencies)
    latencies.close()
    return Row(
        backend=backend,
        workers=workers,
        tasks_per_round=args.tasks,
        handrail_tasks_s=round(summary(rates[HANDRAIL]).median, 1),
        bare_tasks_s=round(summary(rates[BARE]).median, 1),
        ratio=round(same_round_ratio(rates[HANDRAIL], rates[BARE]), 3),
        target=TARGET_RATIO,
        latency_ms=_percentiles(idle),
        burst_latency_ms=_percentiles(delays),
        rounds={path: summary(r).rounds for path, r in rates.items()},
    )


@contextmanager
def _backend_url(backend: str, args: argparse.Namespace, folder: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{folder / f'tasks-{uuid.uuid4().hex[:8]}.sqlite'}"
        return
    if args.pg_url:
        yield args.pg_url
        return
    name = f"handrail_bench_tasks_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


async def run(args: argparse.Namespace, folder: Path) -> list[Row]:
    """Every backend and worker count asked for."""
    rows: list[Row] = []
    for backend in args.backends:
        with _backend_url(backend, args, folder) as url:
            runner = _runner(url, "bench-client", listen=False)
            await runner.start()
            try:
                for workers in args.workers:
                    row = await configuration(runner, url, backend, workers, args)
                    rows.append(row)
                    print(f"  {backend} x{workers}: done", file=sys.stderr)
            finally:
                await runner.stop()
    return rows


# --- command line -----------------------------------------------------------------------------


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per configuration")
    parser.add_argument("--tasks", type=int, default=300, help="tasks per path per round")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up tasks per path")
    parser.add_argument(
        "--latency", type=int, default=40, help="idle submit->running samples per path"
    )
    parser.add_argument("--workers", type=_counts, default=[1, 4], help="e.g. 1,4")
    parser.add_argument("--backends", type=lambda t: t.split(","), default=["sqlite", "postgres"])
    parser.add_argument("--pg-url", help="a PostgreSQL database to use (default: a scratch one)")
    parser.add_argument("--dir", type=Path, help="folder for the SQLite files (default: temp)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: 1 round of 12")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.tasks, args.warmup, args.latency = 1, 12, 4, 3
    return args


def report(rows: list[Row]) -> str:
    """The results as a table."""
    body = [
        (
            f"{row.backend} x{row.workers}",
            f"{row.handrail_tasks_s:.1f}",
            f"{row.bare_tasks_s:.1f}",
            f"{row.ratio:.3f}",
            f"{row.latency_ms[HANDRAIL]['p50']:.1f}/{row.latency_ms[HANDRAIL]['p99']:.1f}",
            f"{row.latency_ms[BARE]['p50']:.1f}/{row.latency_ms[BARE]['p99']:.1f}",
        )
        for row in rows
    ]
    header = (
        "backend x workers",
        "handrail tasks/s",
        "bare tasks/s",
        "handrail/bare",
        "handrail submit->running ms p50/p99",
        "bare p50/p99",
    )
    title = f"No-op task, submitted and completed; target handrail/bare >= {TARGET_RATIO}"
    return table(header, body, title)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it ran (the numbers are reported, not judged)."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as temp:
        folder = args.dir or Path(temp)
        rows = asyncio.run(run(args, folder))
    print(report(rows))
    settings: dict[str, object] = {
        "rounds": args.rounds,
        "tasks_per_round": args.tasks,
        "warmup": args.warmup,
        "latency_samples": args.latency,
    }
    if args.json:
        payload = {
            "environment": environment_facts(settings, ["dbos", "sqlalchemy", "psycopg"]),
            "results": {f"{row.backend}_{row.workers}": asdict(row) for row in rows},
        }
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
