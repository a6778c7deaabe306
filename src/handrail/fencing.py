"""Fences for write attempts: may a worker thread still start the tool, and is one running?

A sync tool runs in a worker thread, and asyncio cannot stop a thread: when an attempt's
deadline passes, or its caller stops waiting, the thread goes on and may still make the
effect. The executor marks each attempt with a `Fence` (`fenced`); the thread that runs
a sync tool passes it right before calling the tool (`enter`: refused once the attempt
was abandoned or its lease has run out) and reports when it ends. The executor then
knows whether any thread of an attempt may still be inside the tool, and what the last
one returned. Never reads or writes a store, and never decides what a lease is.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["Fence", "FencedOffError", "ThreadOutcome", "fenced", "run_in_thread"]


class FencedOffError(Exception):
    """The tool was not called: its attempt was abandoned or its lease had run out."""


class _InterruptedError(Exception):
    """The thread left the tool by a BaseException: no outcome is known."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ThreadOutcome:
    """What the tool's call in a worker thread ended with: a result or an exception."""

    result: object = None
    error: Exception | None = None


class Fence:
    """One attempt's gate for worker threads; thread-safe.

    `may_start` is asked (under the fence's lock) right before a thread calls the tool:
    the executor's check that the attempt's lease is still valid.
    """

    def __init__(self, *, may_start: Callable[[], bool]) -> None:
        self._may_start = may_start
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._running = 0
        self._concurrent = False
        self._abandoned = False
        self._last: ThreadOutcome | None = None

    def enter(self) -> bool:
        """In a worker thread: True if it may call the tool now (it then counts as running)."""
        with self._lock:
            if self._abandoned or not self._may_start():
                return False
            self._running += 1
            self._concurrent = self._concurrent or self._running > 1
            self._idle.clear()
            return True

    def leave(self, outcome: ThreadOutcome) -> None:
        """In a worker thread that entered: the tool's call ended with `outcome`."""
        with self._lock:
            self._running -= 1
            self._last = outcome
            if self._running == 0:
                self._idle.set()

    def abandon(self) -> bool:
        """No thread may start from now on; True if one is still inside the tool."""
        with self._lock:
            self._abandoned = True
            return self._running > 0

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no thread is inside the tool, at most `timeout` seconds; True if none."""
        return self._idle.wait(timeout)

    @property
    def outcome(self) -> ThreadOutcome | None:
        """How the last thread's call ended, once none runs; None if unknown.

        An attempt's calls run one after another (each retry awaits the one before), so
        the last to end is the one that counts. Unknown while one still runs, before any
        ran, and whenever two ran at the same time.
        """
        with self._lock:
            if self._running or self._concurrent:
                return None
            return self._last


_CURRENT: ContextVar[Fence | None] = ContextVar("handrail_fence", default=None)


@contextmanager
def fenced(fence: Fence) -> Iterator[Fence]:
    """Within this block, sync tools this context invokes pass `fence` in their thread."""
    token = _CURRENT.set(fence)
    try:
        yield fence
    finally:
        _CURRENT.reset(token)


async def run_in_thread(fn: Callable[..., Any], *args: Any) -> object:  # noqa: ANN401
    """`fn(*args)` in a worker thread, through the current attempt's fence if there is one."""
    fence = _CURRENT.get()
    if fence is None:
        return await asyncio.to_thread(fn, *args)
    return await asyncio.to_thread(_through, fence, fn, args)


def _through(fence: Fence, fn: Callable[..., Any], args: tuple[Any, ...]) -> object:
    if not fence.enter():
        raise FencedOffError
    outcome = ThreadOutcome(error=_InterruptedError())
    try:
        result = fn(*args)
    except Exception as exc:
        outcome = ThreadOutcome(error=exc)
        raise
    else:
        outcome = ThreadOutcome(result=result)
        return result
    finally:
        fence.leave(outcome)
