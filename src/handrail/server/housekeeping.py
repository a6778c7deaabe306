"""The service's periodic clean-up: ended console sessions and expired Idempotency-Keys.

Both stay correct without it (an ended session proves nothing, an expired key is
claimed anew); this only keeps the tables from growing without end. Every worker
may run it: each purge is a plain DELETE of rows past their time, so two workers
purging at once delete each row once. A failed round is logged and retried at the
next interval; it never stops the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from handrail.clock import Clock
from handrail.errors import StoreError
from handrail.store.base import Store

__all__ = ["Housekeeping"]

_log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

_SESSION_GRACE = timedelta(days=1)
"""Ended sessions are kept a day, so a person's last sessions can still be looked into."""


class Housekeeping:
    """Purges ended sessions and expired idempotency records every `every_seconds`."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        every_seconds: float = 300.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if every_seconds <= 0:
            msg = "the housekeeping interval must be positive"
            raise ValueError(msg)
        self._store = store
        self._clock = clock
        self._every = every_seconds
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    def purge_once(self) -> tuple[int, int]:
        """One round, blocking: (sessions, idempotency records) deleted."""
        now = self._clock.now()
        sessions = self._store.purge_sessions(before=now - _SESSION_GRACE)
        keys = self._store.purge_idempotency_keys(before=now)
        return sessions, keys

    async def start(self) -> None:
        """Start purging in the background (a second call does nothing)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="handrail-housekeeping")

    async def stop(self) -> None:
        """Stop purging; waits for the round in flight to be cancelled."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                sessions, keys = await asyncio.to_thread(self.purge_once)
            except StoreError as exc:
                _log.warning("housekeeping failed, retrying later: %s", exc)
            else:
                if sessions or keys:
                    _log.info(
                        "purged %d ended sessions, %d expired idempotency keys", sessions, keys
                    )
            await self._sleep(self._every)
