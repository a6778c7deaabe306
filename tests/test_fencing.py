"""Fences: a worker thread of an abandoned or expired attempt never calls the tool.

The thread passes the fence right before the call; the fence knows whether any thread
is inside and how the last call ended. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from handrail.fencing import Fence, FencedOffError, ThreadOutcome, fenced, run_in_thread

pytestmark = pytest.mark.anyio

WAIT_S = 60.0


class _Calls:
    def __init__(self) -> None:
        self.made: list[str] = []
        self.inside = threading.Event()
        self.release = threading.Event()

    def quick(self, name: str) -> str:
        self.made.append(name)
        return f"done {name}"

    def blocking(self, name: str) -> str:
        self.made.append(name)
        self.inside.set()
        assert self.release.wait(WAIT_S)
        return f"done {name}"


async def test_without_a_fence_a_call_runs_in_a_thread_as_before() -> None:
    calls = _Calls()
    assert await run_in_thread(calls.quick, "a") == "done a"
    assert calls.made == ["a"]


async def test_a_fenced_call_runs_while_it_may_start_and_its_outcome_is_kept() -> None:
    calls = _Calls()
    fence = Fence(may_start=lambda: True)
    with fenced(fence):
        assert await run_in_thread(calls.quick, "a") == "done a"
    assert fence.outcome == ThreadOutcome(result="done a")
    assert fence.wait_idle(0)
    assert fence.abandon() is False


@pytest.mark.parametrize("why", ["lease ran out", "abandoned"])
async def test_a_thread_that_may_not_start_never_calls_the_function(why: str) -> None:
    calls = _Calls()
    fence = Fence(may_start=lambda: why != "lease ran out")
    if why == "abandoned":
        fence.abandon()
    with fenced(fence), pytest.raises(FencedOffError):
        await run_in_thread(calls.quick, "a")
    assert calls.made == []
    assert fence.outcome is None


async def test_abandoning_says_whether_a_thread_is_still_inside_and_it_still_reports_its_end() -> (
    None
):
    calls = _Calls()
    fence = Fence(may_start=lambda: True)
    with fenced(fence):
        task = asyncio.create_task(run_in_thread(calls.blocking, "a"))
        assert await asyncio.to_thread(calls.inside.wait, WAIT_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fence.abandon() is True
    assert fence.outcome is None
    assert fence.wait_idle(0) is False
    calls.release.set()
    assert await asyncio.to_thread(fence.wait_idle, WAIT_S)
    assert fence.outcome == ThreadOutcome(result="done a")
    with fenced(fence), pytest.raises(FencedOffError):
        await run_in_thread(calls.quick, "b")
    assert calls.made == ["a"]


def _raise(error: BaseException) -> None:
    raise error


async def test_an_exception_is_the_outcome_and_a_base_exception_an_unknown_one() -> None:
    fence = Fence(may_start=lambda: True)
    failure = ValueError("refused")
    with fenced(fence), pytest.raises(ValueError, match="refused"):
        await run_in_thread(_raise, failure)
    assert fence.outcome == ThreadOutcome(error=failure)
    with fenced(fence), pytest.raises(KeyboardInterrupt):
        await run_in_thread(_raise, KeyboardInterrupt())
    outcome = fence.outcome
    assert outcome is not None
    assert outcome.result is None
    assert type(outcome.error).__name__ == "_InterruptedError"


async def test_two_threads_inside_at_once_leave_no_single_outcome() -> None:
    calls = _Calls()
    fence = Fence(may_start=lambda: True)
    both = threading.Barrier(2, timeout=WAIT_S)

    def meet(name: str) -> str:
        both.wait()
        return calls.quick(name)

    with fenced(fence):
        results = await asyncio.gather(run_in_thread(meet, "a"), run_in_thread(meet, "b"))
    assert sorted(results) == ["done a", "done b"]  # type: ignore[type-var]
    assert fence.outcome is None
