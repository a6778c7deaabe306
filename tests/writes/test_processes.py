"""Exactly-once and UNKNOWN across real OS processes, on SQLite and PostgreSQL.

Children run `_worker.py` against the same store (a SQLite file or the PostgreSQL test
database) and the same downstream ticket file, which never dedupes: its row count is
the number of effects. Every wait on a child is bounded, and every child is killed and
reaped in a `finally`, so a failing test leaves no process behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import pytest
from _worker import ABANDON_RECONCILE, ALICE, TOOL, Downstream, Hang, build_registry, keyring

from handrail import Gate, ToolCall
from handrail.clock import Clock, SystemClock
from handrail.declare.registry import Registry
from handrail.errors import ErrorCode
from handrail.execution import ExecutionRecord, ExecutionStatus, plan_key
from handrail.plans import PlanState
from handrail.store import SqlStore
from handrail.testing import FixedClock, MemoryAuditSink
from handrail.writes.reconcile import PassReport, Reconciler
from handrail.writes.service import Writes

WORKER = Path(__file__).with_name("_worker.py")
TESTS = WORKER.parent.parent
"""On a child's path too: the worker imports the shared test helpers there."""
PROCESSES = 8
CALLS = 50
STARTUP_S = 90.0
"""Eight interpreters importing Handrail on two busy cores: generous on purpose."""
RUN_S = 90.0


class _Child:
    """One worker process, driven line by line over its pipes."""

    def __init__(self, config: dict[str, Any], stderr: Path) -> None:
        self._stderr_path = stderr
        self._stderr: IO[bytes] = stderr.open("wb")
        path = [str(TESTS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, str(WORKER), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=0,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        )
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.process.pid

    def _diagnosis(self) -> str:
        self._stderr.flush()
        tail = self._stderr_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        return f"worker {self.pid} (exit {self.process.poll()}) stderr:\n{tail}"

    def read_line(self, timeout: float) -> str:
        """The next line the child prints, waiting at most `timeout` seconds."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        end = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = end - time.monotonic()
            assert left > 0, f"no line within {timeout} s; {self._diagnosis()}"
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 1 << 16)
                assert chunk, f"the worker closed its output; {self._diagnosis()}"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")

    def kill(self) -> int:
        """SIGKILL the child and reap it; its exit status."""
        self.process.send_signal(signal.SIGKILL)
        return self.process.wait(timeout=RUN_S)

    def close(self) -> None:
        """Kill the child if it still runs, reap it, close every pipe."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=RUN_S)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        self._stderr.close()


def _url(store: SqlStore) -> str:
    """The URL a child opens the same store by."""
    url = store.engine.url
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///{url.database}"
    return url.render_as_string(hide_password=False)


def _config(
    store: SqlStore, downstream: Downstream, plan_id: str, *, calls: int, hang: Hang
) -> dict[str, Any]:
    return {
        "store": _url(store),
        "downstream": str(downstream.path),
        "plan_id": plan_id,
        "calls": calls,
        "hang": hang.value,
    }


async def _confirmed_plan(registry: Registry, writes: Writes, clock: Clock) -> str:
    """A plan proposed through the gate and confirmed by its requester with a token."""
    gate = Gate(registry, writes=writes, clock=clock)
    call = ToolCall(id="call-propose", name=TOOL, arguments='{"asset_id": "asset-42"}')
    envelope = await gate.handle(call, ALICE)
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    plan_id = envelope.data["plan_id"]
    token = await writes.issue_token(plan_id, ALICE)
    confirmed = await writes.confirm(plan_id, token.value, ALICE)
    assert confirmed.state is PlanState.CONFIRMED
    return str(plan_id)


def _key(plan_id: str) -> str:
    return plan_key(tenant_id=ALICE.tenant_id, tool=TOOL, plan_id=plan_id)


def _record(store: SqlStore, plan_id: str) -> ExecutionRecord:
    record = store.get_execution(_key(plan_id))
    assert record is not None
    return record


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


@pytest.mark.invariant(4)
def test_fifty_concurrent_executions_from_eight_processes_make_exactly_one_effect(
    sql_store: SqlStore, tmp_path: Path
) -> None:
    downstream = Downstream(tmp_path / "downstream.db")
    downstream.create()
    registry = build_registry(downstream)
    clock = SystemClock()
    writes = Writes(registry, sql_store, keyring(), clock=clock, worker_id="parent")
    plan_id = asyncio.run(_confirmed_plan(registry, writes, clock))

    children: list[_Child] = []
    try:
        for n, calls in enumerate(_shares(CALLS, PROCESSES)):
            config = _config(sql_store, downstream, plan_id, calls=calls, hang=Hang.NONE)
            children.append(_Child(config, tmp_path / f"worker-{n}.err"))
        for child in children:
            assert child.read_line(STARTUP_S) == "ready"
        for child in children:  # the start signal: every child is ready and waiting
            child.send("go")
        answers = [json.loads(child.read_line(RUN_S)) for child in children]
        assert [child.process.wait(timeout=RUN_S) for child in children] == [0] * PROCESSES
    finally:
        for child in children:
            child.close()

    record = _record(sql_store, plan_id)
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.attempts == 1
    assert record.lease_owner is None
    ticket = record.result_value
    assert record.business_id == ticket["ticket_no"]

    # One row downstream, opened by one of the children under the plan's key.
    rows = downstream.rows()
    assert len(rows) == 1
    assert rows[0][0] == _key(plan_id)
    assert rows[0][1] in {child.pid for child in children}
    assert ticket["opened_by"] == rows[0][1]

    # All fifty callers got that ticket; exactly one of them ran the tool.
    outcomes = [outcome for answer in answers for outcome in answer]
    assert len(outcomes) == CALLS
    assert [o["envelope"]["status"] for o in outcomes] == ["ok"] * CALLS
    assert [o["envelope"]["data"] for o in outcomes] == [ticket] * CALLS
    assert sum(not o["replayed"] for o in outcomes) == 1

    plan = asyncio.run(writes.get_plan(plan_id, ALICE))
    assert plan.state is PlanState.EXECUTED


def _start_hanging_child(
    store: SqlStore, downstream: Downstream, plan_id: str, hang: Hang, tmp_path: Path
) -> tuple[_Child, ExecutionRecord]:
    """A child whose write is RUNNING (its tool said so) when this returns, and killed."""
    child = _Child(_config(store, downstream, plan_id, calls=1, hang=hang), tmp_path / "worker.err")
    try:
        assert child.read_line(STARTUP_S) == "ready"
        child.send("go")
        assert child.read_line(RUN_S) == "running"
        running = _record(store, plan_id)
        assert running.status is ExecutionStatus.RUNNING
        assert running.lease_owner == f"proc-{child.pid}"
        assert child.kill() == -signal.SIGKILL
    finally:
        child.close()
    return child, running


@pytest.mark.invariant(6)
def test_a_worker_killed_after_the_effect_is_unknown_after_its_lease_and_reconciled_as_found(
    sql_store: SqlStore, tmp_path: Path
) -> None:
    downstream = Downstream(tmp_path / "downstream.db")
    downstream.create()
    registry = build_registry(downstream)
    clock = FixedClock(datetime.now(UTC))
    audit = MemoryAuditSink()
    writes = Writes(registry, sql_store, keyring(), clock=clock, worker_id="parent")
    reconciler = Reconciler(registry, sql_store, clock=clock, audit=audit)
    plan_id = asyncio.run(_confirmed_plan(registry, writes, clock))

    child, running = _start_hanging_child(
        sql_store, downstream, plan_id, Hang.AFTER_EFFECT, tmp_path
    )
    key = _key(plan_id)
    assert running.lease_expires_at is not None
    (opened,) = downstream.rows()
    assert opened == (key, child.pid)

    # A second short of the lease's end, the dead worker's record is not touched.
    clock.advance((running.lease_expires_at - clock.now()).total_seconds() - 1)
    early = asyncio.run(reconciler.run_once())
    assert early.expired_leases == ()
    assert early.succeeded == ()
    assert _record(sql_store, plan_id) == running

    # Past it: the record is declared UNKNOWN, then the check finds the ticket.
    clock.advance(2)
    report = asyncio.run(reconciler.run_once())
    assert report.expired_leases == (key,)
    assert report.succeeded == (key,)
    stages = [(e.stage, e.decision, e.code) for e in audit.events]
    assert stages == [
        ("lease", "expired", ErrorCode.OUTCOME_UNKNOWN),
        ("reconcile", "succeeded", None),
    ]

    record = _record(sql_store, plan_id)
    found = downstream.find(key)
    assert found is not None
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.attempts == 1
    assert record.business_id == found["ticket_no"]
    assert record.result_value == found

    again = asyncio.run(writes.execute_plan(plan_id, ALICE))
    assert again.replayed
    assert again.envelope.data == found
    assert downstream.rows() == [(key, child.pid)]


@pytest.mark.invariant(6)
def test_a_worker_killed_before_the_effect_is_retried_once_under_its_key_after_the_grace(
    sql_store: SqlStore, tmp_path: Path
) -> None:
    downstream = Downstream(tmp_path / "downstream.db")
    downstream.create()
    registry = build_registry(downstream)
    clock = FixedClock(datetime.now(UTC))
    writes = Writes(registry, sql_store, keyring(), clock=clock, worker_id="parent")
    reconciler = Reconciler(registry, sql_store, clock=clock)
    plan_id = asyncio.run(_confirmed_plan(registry, writes, clock))

    _, running = _start_hanging_child(sql_store, downstream, plan_id, Hang.BEFORE_EFFECT, tmp_path)
    key = _key(plan_id)
    assert running.lease_expires_at is not None
    assert downstream.rows() == []

    clock.advance((running.lease_expires_at - clock.now()).total_seconds() - 1)
    early = asyncio.run(reconciler.run_once())
    assert (early.expired_leases, early.retried, early.succeeded) == ((), (), ())
    assert _record(sql_store, plan_id) == running

    # Lease gone, but "not found" inside the grace window is no proof: still UNKNOWN.
    clock.advance(2)
    first = asyncio.run(reconciler.run_once())
    assert first.expired_leases == (key,)
    assert first.still_unknown == (key,)
    unknown = _record(sql_store, plan_id)
    assert unknown.status is ExecutionStatus.UNKNOWN
    assert unknown.error_code == ErrorCode.OUTCOME_UNKNOWN
    assert downstream.rows() == []

    # Asking again while UNKNOWN answers OUTCOME_UNKNOWN and runs nothing.
    asked = asyncio.run(writes.execute_plan(plan_id, ALICE))
    assert asked.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert asked.replayed
    assert downstream.rows() == []

    # Past the grace window and the next check: proof of non-execution, one retry.
    assert unknown.next_check_at is not None
    grace_ends = unknown.created_at.timestamp() + registry.get(TOOL).spec.reconcile.not_found_grace
    due = max(grace_ends, unknown.next_check_at.timestamp()) + 1
    clock.advance(due - clock.now().timestamp())
    second = asyncio.run(reconciler.run_once())
    assert second.succeeded == (key,)

    record = _record(sql_store, plan_id)
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.attempts == 2
    assert downstream.rows() == [(key, os.getpid())]
    found = downstream.find(key)
    assert found is not None
    assert record.business_id == found["ticket_no"]
    assert record.result_value == found

    again = asyncio.run(writes.execute_plan(plan_id, ALICE))
    assert again.replayed
    assert again.envelope.data == found
    assert len(downstream.rows()) == 1


ABANDON_TIMEOUT_S = 0.2
"""The child's deadline in real seconds: its call is still blocked when it passes."""


@pytest.mark.invariant(4)
@pytest.mark.invariant(6)
def test_a_call_that_outlives_its_deadline_in_another_process_is_not_rerun_by_a_reconciler(
    sql_store: SqlStore, tmp_path: Path
) -> None:
    downstream = Downstream(tmp_path / "downstream.db")
    downstream.create()
    # No grace: were the record not held, "not found" would be proof at once.
    registry = build_registry(downstream, policy=ABANDON_RECONCILE)
    clock = SystemClock()
    writes = Writes(registry, sql_store, keyring(), clock=clock, worker_id="parent")
    reconciler = Reconciler(registry, sql_store, clock=clock)
    plan_id = asyncio.run(_confirmed_plan(registry, writes, clock))
    key = _key(plan_id)

    config = _config(sql_store, downstream, plan_id, calls=1, hang=Hang.UNTIL_RELEASED)
    child = _Child({**config, "timeout": ABANDON_TIMEOUT_S}, tmp_path / "worker.err")
    try:
        assert child.read_line(STARTUP_S) == "ready"
        child.send("go")
        assert child.read_line(RUN_S) == "running"
        (answer,) = json.loads(child.read_line(RUN_S))
        assert answer["envelope"]["error_type"] == ErrorCode.OUTCOME_UNKNOWN

        # The child's thread may still open the ticket: a reconciler here re-runs nothing.
        assert asyncio.run(reconciler.run_once()) == PassReport()
        assert downstream.rows() == []
        held = _record(sql_store, plan_id)
        assert (held.status, held.lease_owner) == (
            ExecutionStatus.RUNNING,
            f"proc-{child.pid}",
        )

        child.send("release")
        assert child.read_line(RUN_S) == "settled"
        assert child.process.wait(timeout=RUN_S) == 0
    finally:
        child.close()

    record = _record(sql_store, plan_id)
    found = downstream.find(key)
    assert found is not None
    assert (record.status, record.attempts) == (ExecutionStatus.SUCCEEDED, 1)
    assert record.business_id == found["ticket_no"]
    assert downstream.rows() == [(key, child.pid)]
    assert asyncio.run(reconciler.run_once()) == PassReport()
    again = asyncio.run(writes.execute_plan(plan_id, ALICE))
    assert again.replayed
    assert again.envelope.data == found
    assert downstream.rows() == [(key, child.pid)]
