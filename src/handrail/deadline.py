"""Deadlines for coroutines: cancel the work when its time is up, and say so.

asyncio can interrupt a coroutine only where it suspends, so the timer is armed at the
first suspension: work that finishes without suspending pays no timer at all (a loop
timer costs about 2 µs, more than the rest of a trivial call). Never retries anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["DeadlineExceededError", "within"]

T = TypeVar("T")


class DeadlineExceededError(TimeoutError):
    """The deadline passed; the work was cancelled (or never started)."""


class _Bounded(Generic[T]):
    """Drives a coroutine as `await` would (PEP 380), arming a timer once it suspends."""

    __slots__ = ("_coro", "_remaining")

    def __init__(self, coro: Coroutine[Any, Any, T], remaining: float) -> None:
        self._coro = coro
        self._remaining = remaining

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self._coro
        if self._remaining <= 0:
            coro.close()
            raise DeadlineExceededError
        try:
            signal = coro.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - a suspended coroutine always has a task
            raise RuntimeError("deadlines need an asyncio task")
        cancelling = task.cancelling()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = asyncio.get_running_loop().call_later(self._remaining, expire)
        absorbed = False
        try:
            while True:
                try:
                    sent = yield signal
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:  # noqa: BLE001 - forwarded, as `await` does
                    signal = coro.throw(exc)
                else:
                    signal = coro.send(sent)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            if expired:
                absorbed = True
                if task.uncancel() <= cancelling:
                    raise DeadlineExceededError from None
            raise
        finally:
            timer.cancel()
            if expired and not absorbed:
                # The work swallowed our cancellation and finished; undo our request.
                task.uncancel()


def within(coro: Coroutine[Any, Any, T], remaining: float) -> _Bounded[T]:
    """Await `coro` for at most `remaining` seconds; raise DeadlineExceededError after.

    A cancellation from outside still propagates as CancelledError. With no time left
    the coroutine is closed without running.
    """
    return _Bounded(coro, remaining)
