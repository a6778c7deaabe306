"""Leases of write attempts that outlived their caller, kept by a heartbeat until they end.

When an attempt's deadline passes (or its caller stops waiting) while a worker thread
is still inside a sync tool, the effect may yet happen. The record then stays RUNNING
under the attempt's lease, and a `LeaseKeeper` renews that lease every third of its
span, from a thread of its own (it outlives the event loop that started it), until the
attempt's fence says no thread is inside the tool; then it hands the call's outcome to
its owner to write. Meanwhile a reconciler finds nothing due: the attempt may still
land, so "not found" is no proof yet.

A renewal is a compare-and-set on the record's status, version and lease owner, so a
reconciler that read the lease as expired just before loses its own compare-and-set.
Never decides an outcome and never calls a tool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from handrail.clock import Clock
from handrail.errors import StoreError
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.fencing import Fence, ThreadOutcome
from handrail.store.base import Store

__all__ = ["LeaseKeeper"]


class LeaseKeeper:
    """Holds one RUNNING record's lease while its attempt's threads run; one thread each.

    `finish(record, outcome)` is called (in the keeper's thread) with the record as last
    renewed once no thread is inside the tool; `outcome` is None when it is not known
    (several threads ran). `lost(record)` is called instead when a renewal found the
    record moved by someone else: the lease is gone, nothing more is written.
    `ended()` is called last, whatever happened.
    """

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        record: ExecutionRecord,
        fence: Fence,
        span: float,
        finish: Callable[[ExecutionRecord, ThreadOutcome | None], None],
        lost: Callable[[ExecutionRecord], None],
        ended: Callable[[LeaseKeeper], None],
    ) -> None:
        if record.status is not ExecutionStatus.RUNNING or record.lease_owner is None:
            msg = "only a RUNNING record with a lease owner can be kept"
            raise ValueError(msg)
        if span <= 0:
            msg = "a lease span must be positive"
            raise ValueError(msg)
        self._store = store
        self._clock = clock
        self._record = record
        self._fence = fence
        self._span = span
        self._finish = finish
        self._lost = lost
        self._ended = ended
        self._thread = threading.Thread(
            target=self._run, name=f"handrail-lease-{record.idempotency_key[-12:]}"
        )

    @property
    def record(self) -> ExecutionRecord:
        """The record as last written by this keeper."""
        return self._record

    def start(self) -> None:
        """Start the heartbeat thread (not a daemon: the process waits for the outcome)."""
        self._thread.start()

    def _renew(self) -> bool | None:
        """One heartbeat: True renewed, False lost to another writer, None store trouble."""
        current = self._record
        now = self._clock.now()
        renewed = current.updated(
            lease_expires_at=now + timedelta(seconds=self._span), updated_at=now
        )
        try:
            written = self._store.replace_execution(
                renewed,
                expect_status=current.status,
                expect_version=current.version,
                lease_owner=current.lease_owner,
            )
        except StoreError:
            # Try again at the next beat: the lease is still ours until someone moves it.
            return None
        if written:
            self._record = renewed
        return written

    def _run(self) -> None:
        try:
            beat = self._span / 3
            renewed = self._renew()
            while renewed is not False and not self._fence.wait_idle(beat):
                renewed = self._renew()
            if renewed is False:
                self._lost(self._record)
            else:
                self._finish(self._record, self._fence.outcome)
        finally:
            self._ended(self)
