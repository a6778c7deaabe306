"""What the workers of one service share, so that several processes act as one.

`shared_state(store, ...)` builds a `SharedState`: the conversation guard with its
denial counts in the store, the rate limiter in Redis (when configured), the secret
ledger that learns every worker's handed-out handles through the store, this worker's
lease settings for the runs it drives, and the background work that keeps them true
(the ledger's refresh, the watcher that takes over runs of dead workers). Confirmation
nonces need nothing here: the store keeps them (`Store.use_nonce`). `open_services`
opens the store first, then wires it in two lines:

    shared = shared_state(store, redis_url=config.handrail.redis, clock=clock, worker_id=wid)
    Handrail.open(store, ..., **shared.handrail_options())  # and `async with shared:`

Never decides anything itself: the guard, the limiter, the ledger and the loop do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from handrail.authz.guard import ConversationGuard, StoreGuardState
from handrail.authz.quota import QuotaPolicy, RateLimiter
from handrail.errors import ConfigurationError, HandrailError
from handrail.loop.leases import RunLeaseWatcher, RunLeasing, TakeOver
from handrail.record.shared_ledger import SharedSecretLedger

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.credentials import SecretProvider
    from handrail.retry import Sleep
    from handrail.store.base import Store

__all__ = ["SharedState", "shared_state"]

_log = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class _Background:
    """The tasks a SharedState runs between `start` and `stop`."""

    refresh: asyncio.Task[None] | None = None
    watchers: list[RunLeaseWatcher] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class SharedState:
    """The parts of one worker that share their state with every other worker.

    `guard`, `limiter` and `ledger` go to `Handrail.open` (`handrail_options`);
    `leasing` to each `AgentLoop` this worker runs (`AgentLoop(leasing=...)`), and
    `watch_runs(loop.take_over)` takes over the runs whose worker died. `start` learns
    the handles handed out so far before the worker serves, then keeps learning every
    `refresh_seconds`; `stop` ends the background work and closes the limiter.
    `limiter` is None without Redis: rates then count in each worker alone.
    """

    guard: ConversationGuard
    limiter: RateLimiter | None
    ledger: SharedSecretLedger
    leasing: RunLeasing
    clock: Clock
    store: Store
    refresh_seconds: float
    sweep_seconds: float
    sleep: Sleep = field(default=asyncio.sleep, repr=False)
    _background: _Background = field(default_factory=_Background, repr=False)

    def handrail_options(self) -> dict[str, Any]:
        """The keyword arguments of `Handrail.open` that make a worker share this state."""
        return {"guard": self.guard, "limiter": self.limiter, "ledger": self.ledger}

    def watch_runs(self, take_over: TakeOver) -> RunLeaseWatcher:
        """A watcher handing each run whose lease ran out to `take_over`; started by `start`.

        Call it before `start`, or after (it starts at once then); `stop` stops it.
        """
        watcher = RunLeaseWatcher(
            self.store,
            clock=self.clock,
            take_over=take_over,
            interval=self.sweep_seconds,
            sleep=self.sleep,
        )
        self._background.watchers.append(watcher)
        return watcher

    async def start(self) -> None:
        """Learn the handles handed out so far, then keep learning; start the watchers."""
        await asyncio.to_thread(self.ledger.refresh)
        if self._background.refresh is None:
            self._background.refresh = asyncio.create_task(self._refreshing())
        for watcher in self._background.watchers:
            await watcher.start()

    async def stop(self) -> None:
        """Stop the background work and release the limiter's connections."""
        task, self._background.refresh = self._background.refresh, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for watcher in self._background.watchers:
            await watcher.stop()
        if self.limiter is not None:
            await self.limiter.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _refreshing(self) -> None:
        while True:
            await self.sleep(self.refresh_seconds)
            try:
                await asyncio.to_thread(self.ledger.refresh)
            except HandrailError as exc:
                _log.warning("secret handle refresh failed (%s)", type(exc).__name__)


def shared_state(
    store: Store,
    *,
    redis_url: str | None,
    clock: Clock,
    worker_id: str,
    secrets: SecretProvider | None = None,
    quota: QuotaPolicy | None = None,
    redis_prefix: str = "handrail",
    max_denials: int = 3,
    lease_seconds: float = 30.0,
    refresh_seconds: float = 2.0,
    sweep_seconds: float = 5.0,
    sleep: Sleep = asyncio.sleep,
) -> SharedState:
    """The shared parts of the worker `worker_id` over `store` (and Redis at `redis_url`).

    `secrets` is the provider this worker's tools read (the same handles must resolve in
    every worker); `quota` the limits counted in Redis besides each tool's declared
    rate; `redis_prefix` starts every Redis key (one per deployment); `max_denials`
    trips the conversation breaker; a run lease lasts `lease_seconds`; the ledger
    learns every `refresh_seconds` and the watchers look every `sweep_seconds`.
    """
    if refresh_seconds <= 0 or sweep_seconds <= 0:
        raise ConfigurationError("refresh and sweep intervals must be positive")
    limiter = None
    if redis_url is not None:
        limiter = RateLimiter.redis(
            redis_url, policy=quota or QuotaPolicy(), key_prefix=redis_prefix
        )
    elif quota is not None:
        raise ConfigurationError("a quota shared by the workers needs Redis (redis_url)")
    return SharedState(
        guard=ConversationGuard(state=StoreGuardState(store, clock=clock), max_denials=max_denials),
        limiter=limiter,
        ledger=SharedSecretLedger(store, provider=secrets, clock=clock),
        leasing=RunLeasing(owner=worker_id, seconds=lease_seconds, sleep=sleep),
        clock=clock,
        store=store,
        refresh_seconds=refresh_seconds,
        sweep_seconds=sweep_seconds,
        sleep=sleep,
    )
