"""Lease keepers: a held lease is renewed until its attempt's threads end, or lost for good.

A renewal is a compare-and-set on status, version and owner: it survives store trouble
(tried again at the next beat) and stops as soon as another writer moved the record.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta
from typing import Any

import pytest

from _records import execution_record
from handrail.errors import StoreError
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.fencing import Fence, ThreadOutcome
from handrail.store import MemoryStore, Store
from handrail.testing import FixedClock
from handrail.writes.leases import LeaseKeeper

WAIT_S = 60.0
SPAN_S = 0.03
"""A short span, so that the keeper's beats come quickly in real time."""


class _Flaky:
    """A store whose next `fail` record writes raise StoreError; it tells of each write."""

    def __init__(self, inner: Store, *, fail: int) -> None:
        self._inner = inner
        self._fail = fail
        self._changed = threading.Condition()
        self.written: list[ExecutionRecord] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def replace_execution(self, record: ExecutionRecord, **expected: Any) -> bool:
        with self._changed:
            if self._fail:
                self._fail -= 1
                raise StoreError("execution update failed: OperationalError")
        written = self._inner.replace_execution(record, **expected)
        with self._changed:
            if written:
                self.written.append(record)
            self._changed.notify_all()
        return written

    def wait_written(self, count: int) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.written) >= count, WAIT_S)


class _Ends:
    def __init__(self) -> None:
        self.finished: list[tuple[ExecutionRecord, ThreadOutcome | None]] = []
        self.lost: list[ExecutionRecord] = []
        self.ended = threading.Event()

    def keeper(
        self, store: Any, clock: FixedClock, record: ExecutionRecord, fence: Fence
    ) -> LeaseKeeper:
        return LeaseKeeper(
            store=store,
            clock=clock,
            record=record,
            fence=fence,
            span=SPAN_S,
            finish=lambda current, outcome: self.finished.append((current, outcome)),
            lost=self.lost.append,
            ended=lambda _keeper: self.ended.set(),
        )


def _inside() -> Fence:
    fence = Fence(may_start=lambda: True)
    assert fence.enter()
    return fence


def _held(clock: FixedClock) -> ExecutionRecord:
    return execution_record(lease_owner="w1", lease_expires_at=clock.now() + timedelta(seconds=1))


def test_a_keeper_renews_through_store_trouble_and_finishes_when_the_thread_ends() -> None:
    clock = FixedClock()
    store = _Flaky(MemoryStore(), fail=1)
    record = _held(clock)
    store.insert_execution(record)
    fence = _inside()
    ends = _Ends()
    keeper = ends.keeper(store, clock, record, fence)
    keeper.start()
    assert store.wait_written(2)  # the first beat failed; later ones renewed the lease
    fence.leave(ThreadOutcome(result={"ticket_no": "TK-1"}))
    assert ends.ended.wait(WAIT_S)
    assert ends.lost == []
    ((current, outcome),) = ends.finished
    assert outcome == ThreadOutcome(result={"ticket_no": "TK-1"})
    assert current == keeper.record == store.get_execution(record.idempotency_key)
    assert current.lease_expires_at == clock.now() + timedelta(seconds=SPAN_S)
    assert current.version > record.version
    assert current.status is ExecutionStatus.RUNNING


def test_a_keeper_whose_record_another_writer_moved_stops_and_says_it_lost_the_lease() -> None:
    clock = FixedClock()
    store = MemoryStore()
    record = _held(clock)
    store.insert_execution(record)
    taken = record.moved(ExecutionStatus.UNKNOWN, lease_owner="reconciler")
    assert store.replace_execution(taken, expect_status=record.status, expect_version=1)
    ends = _Ends()
    ends.keeper(store, clock, record, _inside()).start()
    assert ends.ended.wait(WAIT_S)
    assert ends.lost == [record]
    assert ends.finished == []
    assert store.get_execution(record.idempotency_key) == taken


@pytest.mark.parametrize(
    "changes",
    [{"status": ExecutionStatus.UNKNOWN}, {"lease_owner": None}],
    ids=["not running", "no owner"],
)
def test_only_a_running_record_with_an_owner_can_be_kept(changes: dict[str, Any]) -> None:
    clock = FixedClock()
    record = dataclasses.replace(_held(clock), **changes)
    with pytest.raises(ValueError, match="RUNNING"):
        _Ends().keeper(MemoryStore(), clock, record, _inside())


def test_a_lease_span_must_be_positive() -> None:
    clock = FixedClock()
    with pytest.raises(ValueError, match="positive"):
        LeaseKeeper(
            store=MemoryStore(),
            clock=clock,
            record=_held(clock),
            fence=_inside(),
            span=0,
            finish=lambda _r, _o: None,
            lost=lambda _r: None,
            ended=lambda _k: None,
        )
