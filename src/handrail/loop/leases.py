"""Run leases: one worker drives a RUNNING run at a time, and a dead worker's run is taken over.

Owns `RunLeasing` (this worker's name and how long its lease on a run lasts), the
heartbeat that renews the lease while the loop drives a run, the claim of a run whose
lease ran out (`claim_expired`, a compare-and-set in the store that also moves the
run's version, so the previous owner's next write fails), and `RunLeaseWatcher`, which
finds such runs and hands each to a taker (`AgentLoop.take_over`). It never writes a
run's document and never decides how a run goes on: the loop does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from handrail.errors import ConfigurationError, ErrorCode, HandrailError
from handrail.loop._session import RunRefusedError
from handrail.runs import RunRecord, RunState, check_lease_owner

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.loop._session import Session
    from handrail.retry import Sleep
    from handrail.store.base import Store

__all__ = ["RunLeaseWatcher", "RunLeasing", "claim_expired", "heartbeat", "stamped"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunLeasing:
    """This worker's leases on the runs it drives: its name and how long a lease lasts.

    While the loop drives a run, a heartbeat renews the lease every third of `seconds`
    (waiting with `sleep`); a run whose lease is `seconds` old is taken over by another
    worker. Every worker sharing a store needs its own `owner` (host:pid, say).
    """

    owner: str
    seconds: float = 30.0
    sleep: Sleep = field(default=asyncio.sleep, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            check_lease_owner(self.owner)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        if not self.seconds > 0:
            raise ConfigurationError("a lease lasts a positive number of seconds")

    def until(self, now: datetime) -> datetime:
        """When a lease taken or renewed at `now` runs out."""
        return now + timedelta(seconds=self.seconds)


def stamped(leasing: RunLeasing | None, record: RunRecord, *, at: datetime) -> RunRecord:
    """`record` as the loop writes it at `at`: leased to this worker while RUNNING, else free.

    Every write of a RUNNING run by its owner is a sign of life, so it renews the lease.
    """
    if leasing is not None and record.state is RunState.RUNNING:
        return record.leased(leasing.owner, leasing.until(at))
    if record.lease_owner is None:
        return record
    return record.leased(None, None)


@contextlib.asynccontextmanager
async def heartbeat(
    leasing: RunLeasing | None, store: Store, clock: Clock, session: Session
) -> AsyncIterator[None]:
    """Renew this worker's lease on the session's run while the block runs.

    Nothing without leasing, or for a session with no stored run (a replay).

    A renewal that finds the lease gone (another worker took the run over) stops the
    heartbeat: the run's next write then fails on its version. A store failure is
    logged and the next renewal tried; the lease runs out if none succeeds.
    """
    if leasing is None or session.record is None:
        yield
        return
    beat = asyncio.create_task(_beat(leasing, store, clock, session.run_id))
    try:
        yield
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat


async def _beat(leasing: RunLeasing, store: Store, clock: Clock, run_id: str) -> None:
    while True:
        await leasing.sleep(leasing.seconds / 3)
        until = leasing.until(clock.now())
        try:
            held = await asyncio.to_thread(
                store.renew_run_lease, run_id, owner=leasing.owner, until=until
            )
        except HandrailError as exc:
            _log.warning("run %s: lease renewal failed (%s)", run_id, type(exc).__name__)
            continue
        if not held:
            _log.warning("run %s: lease lost to another worker; its next write will fail", run_id)
            return


async def claim_expired(
    store: Store, leasing: RunLeasing | None, clock: Clock, record: RunRecord | None
) -> RunRecord:
    """Lease `record`'s run to this worker if its lease ran out; the run as now stored.

    The claim moves the run's version, so the worker that held it (if alive after all)
    fails its next write. The new owner goes on from the last stored step: a step in
    flight at the crash is asked of the model again, and its writes were plans or ran
    under the run's command ids, so none runs twice. ConfigurationError without leasing.

    RunRefusedError: NOT_FOUND for no run; CONFLICT for a run that is not RUNNING, was
    never leased, whose lease still runs, or that another worker claimed first.
    """
    if leasing is None:
        raise ConfigurationError("taking a run over needs an AgentLoop configured with leasing")
    if record is None:
        raise RunRefusedError(ErrorCode.NOT_FOUND, "There is no such run.")
    now = clock.now()
    if (
        record.state is not RunState.RUNNING
        or record.lease_until is None
        or record.lease_until > now
    ):
        raise RunRefusedError(ErrorCode.CONFLICT, "The run is not running under a lapsed lease.")
    until = leasing.until(now)
    won = await asyncio.to_thread(
        store.take_over_run,
        record.run_id,
        expect_version=record.version,
        owner=leasing.owner,
        until=until,
        at=now,
    )
    if not won:
        raise RunRefusedError(ErrorCode.CONFLICT, "Another worker took the run over first.")
    return record.advanced(at=now).leased(leasing.owner, until)


TakeOver = Callable[[str], Awaitable[object]]


class RunLeaseWatcher:
    """Finds RUNNING runs whose lease ran out and hands each to `take_over`, in the background.

    `sweep` looks once (tests and hosts may call it); `start` sweeps every `interval`
    seconds until `stop`. Each taken run is driven in a task of its own, so one long
    run never delays the next sweep; of several workers sweeping at once, the store's
    compare-and-set gives each run to exactly one (the others' CONFLICT is expected).
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        take_over: TakeOver,
        interval: float = 5.0,
        batch: int = 20,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if interval <= 0 or batch < 1:
            raise ConfigurationError("a lease watcher needs a positive interval and batch")
        self._store = store
        self._clock = clock
        self._take_over = take_over
        self._interval = interval
        self._batch = batch
        self._sleep = sleep
        self._loop: asyncio.Task[None] | None = None
        self._driving: dict[str, asyncio.Task[bool]] = {}

    async def sweep(self) -> list[str]:
        """Take over every run expired now; once each has stopped, the ids this worker won."""
        started = await self._launch()
        won = await asyncio.gather(*started.values())
        return [run_id for run_id, taken in zip(started, won, strict=True) if taken]

    async def _launch(self) -> dict[str, asyncio.Task[bool]]:
        """A task taking over each expired run this worker is not driving already."""
        expired = await asyncio.to_thread(
            self._store.expired_runs, now=self._clock.now(), limit=self._batch
        )
        started: dict[str, asyncio.Task[bool]] = {}
        for run_id in expired:
            if run_id in self._driving:
                continue
            task = asyncio.create_task(self._take(run_id))
            self._driving[run_id] = started[run_id] = task
            task.add_done_callback(functools.partial(self._done, run_id))
        return started

    def _done(self, run_id: str, _: asyncio.Task[bool]) -> None:
        self._driving.pop(run_id, None)

    async def _take(self, run_id: str) -> bool:
        try:
            await self._take_over(run_id)
        except RunRefusedError:
            return False  # another worker claimed it first, or it moved on
        except HandrailError as exc:
            _log.warning("run %s: take-over failed (%s)", run_id, type(exc).__name__)
            return False
        return True

    async def start(self) -> None:
        """Sweep every `interval` seconds in the background until `stop`."""
        if self._loop is None:
            self._loop = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop sweeping and cancel the runs being driven (their leases then run out)."""
        tasks = [t for t in (self._loop, *self._driving.values()) if t is not None]
        self._loop = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                await self._launch()
            except HandrailError as exc:
                _log.warning("run lease sweep failed (%s)", type(exc).__name__)
            await self._sleep(self._interval)
