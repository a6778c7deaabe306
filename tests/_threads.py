"""A worker pool for tests in which a sync tool's thread must start before its deadline's timer.

asyncio arms a deadline's timer when the awaited call first suspends, which is right
after the call was handed to a worker thread. On a busy machine that thread may start
only after a short timer has fired: the attempt is then abandoned before the tool ever
ran (its fence refuses it), and a test about a thread that outlives its deadline would
be testing something else. `StartFirstPool.submit` returns only once its job has
finished or a tool has reported (`entered`) that it is inside, so the timer starts after.
Install it with `loop.set_default_executor`; `asyncio.to_thread` then uses it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

ENTRY_WAIT_S = 60.0
"""Bound on waiting for a submitted job to finish or a tool to enter; never reached."""


class StartFirstPool(ThreadPoolExecutor):
    """A thread pool whose `submit` waits for the job to finish or a tool to enter."""

    def __init__(self, *, max_workers: int = 16) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix="start-first")
        self._changed = threading.Condition()
        self._entries = 0

    @property
    def entries(self) -> int:
        """How many tool calls have reported that they are inside."""
        with self._changed:
            return self._entries

    def entered(self) -> None:
        """Called by a tool in its worker thread once it is inside the call."""
        with self._changed:
            self._entries += 1
            self._changed.notify_all()

    def _notify(self, _future: Future[Any]) -> None:
        with self._changed:
            self._changed.notify_all()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._changed:
            before = self._entries
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._notify)
        with self._changed:
            started = self._changed.wait_for(
                lambda: future.done() or self._entries > before, ENTRY_WAIT_S
            )
        assert started, f"a submitted job neither finished nor entered in {ENTRY_WAIT_S} s"
        return future
