"""The scheduler of one turn: order, id matching, concurrency bounds, dependencies, deadlines.

Completion order is randomized without timers: each call yields to the event loop a
chosen number of times before it answers, so overlap is certain and nothing is timed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail.calls import ToolCall
from handrail.clock import FixedClock
from handrail.envelope import Envelope, ErrorDetail, Status
from handrail.errors import ConfigurationError, ErrorCode, HandrailError
from handrail.scheduler import CallPlan, TurnScheduler

pytestmark = pytest.mark.anyio

DEADLINE_IN = 30.0


def _plan(
    call_id: str,
    *,
    read_only: bool = True,
    tool: str | None = "read",
    key: str | None = None,
    after: tuple[str, ...] = (),
) -> CallPlan:
    name = tool if tool is not None else "no_such_tool"
    return CallPlan(
        call=ToolCall(id=call_id, name=name, arguments="{}"),
        read_only=read_only,
        tool=tool,
        resource_key=key,
        after=after,
    )


@dataclass
class Probe:
    """An execute that records starts, ends, deadlines and concurrency, and can fail."""

    delays: Mapping[str, int] = field(default_factory=dict)
    fail: frozenset[str] = frozenset()
    clock: FixedClock | None = None
    advance: Mapping[str, float] = field(default_factory=dict)
    read_only: dict[str, bool] = field(default_factory=dict)
    log: list[tuple[str, str]] = field(default_factory=list)
    deadlines: list[float] = field(default_factory=list)
    running: Counter[str] = field(default_factory=Counter)
    peak: int = 0
    peak_by_tool: Counter[str] = field(default_factory=Counter)
    write_overlapped: bool = False

    async def __call__(self, call: ToolCall, deadline: float) -> Envelope:
        self.deadlines.append(deadline)
        self.log.append(("start", call.id))
        self.running[call.name] += 1
        self.peak = max(self.peak, self.running.total())
        self.peak_by_tool[call.name] = max(self.peak_by_tool[call.name], self.running[call.name])
        try:
            for _ in range(self.delays.get(call.id, 0)):
                await asyncio.sleep(0)
                if not self.read_only.get(call.id, True) and self.running.total() > 1:
                    self.write_overlapped = True
        finally:
            self.running[call.name] -= 1
        if self.clock is not None:
            self.clock.advance(self.advance.get(call.id, 0.0))
        self.log.append(("end", call.id))
        if call.id in self.fail:
            return Envelope(
                call_id=call.id,
                tool=call.name,
                status=Status.ERROR,
                summary="failed",
                error=ErrorDetail(code=ErrorCode.NOT_FOUND),
            )
        return Envelope(
            call_id=call.id, tool=call.name, status=Status.OK, summary="ok", data=call.id
        )

    def started(self) -> list[str]:
        return [call_id for event, call_id in self.log if event == "start"]

    def ended(self) -> list[str]:
        return [call_id for event, call_id in self.log if event == "end"]

    def at(self, event: str, call_id: str) -> int:
        return self.log.index((event, call_id))


async def _run(
    plans: Sequence[CallPlan],
    probe: Probe,
    *,
    clock: FixedClock | None = None,
    deadline_in: float = DEADLINE_IN,
    **options: object,
) -> list[Envelope]:
    clock = clock or FixedClock()
    scheduler = TurnScheduler(clock=clock, **options)  # type: ignore[arg-type]
    return await scheduler.run(plans, probe, deadline=clock.monotonic() + deadline_in)


@pytest.mark.invariant(7)
@given(
    turn=st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=1, max_size=10),
)
def test_writes_run_alone_in_order_reads_overlap_and_results_match_ids(
    turn: list[tuple[bool, int]],
) -> None:
    plans = [
        _plan(f"c{i}", read_only=read, tool="read" if read else "write")
        for i, (read, _) in enumerate(turn)
    ]
    probe = Probe(
        delays={f"c{i}": delay for i, (_, delay) in enumerate(turn)},
        read_only={f"c{i}": read for i, (read, _) in enumerate(turn)},
    )

    async def main() -> list[Envelope]:
        return await _run(plans, probe)

    results = anyio.run(main)
    ids = [p.call.id for p in plans]
    assert [r.call_id for r in results] == ids
    assert [r.data for r in results] == ids
    assert sorted(probe.started()) == sorted(ids)
    writes = [p.call.id for p in plans if not p.read_only]
    assert [c for c in probe.started() if c in writes] == writes
    assert not probe.write_overlapped
    for position, write in enumerate(plans):
        if write.read_only:
            continue
        for before in plans[:position]:
            assert probe.at("end", before.call.id) < probe.at("start", write.call.id)
        for later in plans[position + 1 :]:
            assert probe.at("end", write.call.id) < probe.at("start", later.call.id)
    # Reads between two writes that suspend at least once are in flight together.
    segment: list[int] = []
    for read, delay in [*turn, (False, 0)]:
        if not read:
            if len(segment) >= 2:
                assert probe.peak >= 2
            segment = []
        elif delay:
            segment.append(delay)


async def test_results_come_back_in_call_order_whatever_the_completion_order() -> None:
    plans = [_plan(f"c{i}") for i in range(5)]
    probe = Probe(delays={f"c{i}": 10 - 2 * i for i in range(5)})
    results = await _run(plans, probe)
    assert probe.ended() == ["c4", "c3", "c2", "c1", "c0"]
    assert [r.call_id for r in results] == ["c0", "c1", "c2", "c3", "c4"]
    assert [r.data for r in results] == ["c0", "c1", "c2", "c3", "c4"]
    assert probe.peak == 5


async def test_concurrency_is_bounded_overall_and_per_tool_bulkhead() -> None:
    plans = [_plan(f"a{i}", tool="a") for i in range(6)] + [
        _plan(f"b{i}", tool="b") for i in range(6)
    ]
    probe = Probe(delays={p.call.id: 3 for p in plans})
    results = await _run(plans, probe, max_concurrency=3, bulkheads={"a": 2})
    assert all(r.ok for r in results)
    assert probe.peak == 3
    assert probe.peak_by_tool["a"] == 2
    assert probe.peak_by_tool["b"] == 3


async def test_a_bulkhead_of_one_serializes_that_tool_only() -> None:
    plans = [_plan("a0", tool="a"), _plan("a1", tool="a"), _plan("b0", tool="b")]
    probe = Probe(delays={"a0": 3, "a1": 3, "b0": 3})
    await _run(plans, probe, bulkheads={"a": 1})
    assert probe.peak_by_tool["a"] == 1
    assert probe.peak == 2
    assert probe.at("end", "a0") < probe.at("start", "a1")


async def test_calls_sharing_a_resource_key_run_one_after_the_other_in_model_order() -> None:
    plans = [_plan("k1", key="row-1"), _plan("free"), _plan("k2", key="row-1")]
    probe = Probe(delays={"k1": 4, "free": 4, "k2": 1})
    results = await _run(plans, probe)
    assert all(r.ok for r in results)
    assert probe.at("end", "k1") < probe.at("start", "k2")
    assert probe.at("start", "free") < probe.at("end", "k1")


async def test_a_declared_dependency_waits_for_the_call_it_names() -> None:
    plans = [_plan("first"), _plan("other"), _plan("second", after=("first",))]
    probe = Probe(delays={"first": 4, "other": 6, "second": 1})
    results = await _run(plans, probe)
    assert [r.data for r in results] == ["first", "other", "second"]
    assert probe.at("end", "first") < probe.at("start", "second")
    assert probe.at("start", "second") < probe.at("end", "other")


async def test_a_failed_dependency_refuses_the_dependents_and_spares_the_rest() -> None:
    plans = [
        _plan("lookup"),
        _plan("use", after=("lookup",)),
        _plan("use_again", after=("use",)),
        _plan("unrelated"),
    ]
    probe = Probe(fail=frozenset({"lookup"}))
    results = await _run(plans, probe)
    assert [r.error_type for r in results] == [
        ErrorCode.NOT_FOUND,
        ErrorCode.CONFLICT,
        ErrorCode.CONFLICT,
        None,
    ]
    assert not results[1].retryable
    assert sorted(probe.started()) == ["lookup", "unrelated"]


@pytest.mark.parametrize("after", [("later",), ("ghost",), ("self",), ("ok", "ghost")])
async def test_a_dependency_on_no_earlier_call_is_refused_and_not_run(
    after: tuple[str, ...],
) -> None:
    plans = [_plan("ok"), _plan("self", after=after), _plan("later", after=("self",))]
    probe = Probe()
    results = await _run(plans, probe)
    assert [r.error_type for r in results] == [
        None,
        ErrorCode.INVALID_ARGUMENTS,
        ErrorCode.CONFLICT,
    ]
    assert probe.started() == ["ok"]


async def test_repeated_call_ids_are_refused_after_the_first_which_runs() -> None:
    plans = [_plan("x"), _plan("y"), _plan("x", read_only=False, tool="write")]
    probe = Probe()
    results = await _run(plans, probe)
    assert [r.call_id for r in results] == ["x", "y", "x"]
    assert [r.error_type for r in results] == [None, None, ErrorCode.INVALID_ARGUMENTS]
    assert results[2].tool == "write"
    assert probe.started() == ["x", "y"]


async def test_a_dependency_on_a_repeated_id_means_its_first_call() -> None:
    plans = [_plan("x"), _plan("x"), _plan("z", after=("x",))]
    probe = Probe(delays={"x": 3})
    results = await _run(plans, probe)
    assert [r.error_type for r in results] == [None, ErrorCode.INVALID_ARGUMENTS, None]
    assert probe.at("end", "x") < probe.at("start", "z")


async def test_a_refusal_of_an_unknown_tool_names_it_by_the_call_bounded() -> None:
    plans = [_plan("x"), _plan("x", tool=None, read_only=False)]
    plans[1] = CallPlan(
        call=ToolCall(id="x", name="n" * 500, arguments="{}"), read_only=False, tool=None
    )
    results = await _run(plans, Probe())
    assert results[1].tool == "n" * 128
    assert results[1].error_type is ErrorCode.INVALID_ARGUMENTS


async def test_every_call_receives_the_same_absolute_deadline() -> None:
    clock = FixedClock()
    plans = [_plan("r1"), _plan("w", read_only=False, tool="write"), _plan("r2")]
    probe = Probe(delays={"r1": 2}, clock=clock, advance={"r1": 3.0, "w": 4.0})
    results = await _run(plans, probe, clock=clock, deadline_in=10.0)
    assert all(r.ok for r in results)
    assert probe.deadlines == [1010.0, 1010.0, 1010.0]


async def test_a_call_whose_turn_comes_after_the_deadline_is_not_started() -> None:
    clock = FixedClock()
    plans = [
        _plan("w", read_only=False, tool="write"),
        _plan("r1"),
        _plan("r2", after=("w",)),
    ]
    probe = Probe(clock=clock, advance={"w": 11.0})
    results = await _run(plans, probe, clock=clock, deadline_in=10.0)
    assert probe.started() == ["w"]
    assert results[0].ok
    assert [r.error_type for r in results[1:]] == [ErrorCode.TIMEOUT, ErrorCode.TIMEOUT]
    assert all(r.retryable for r in results[1:])


@pytest.mark.parametrize("deadline_in", [0.0, -5.0])
async def test_with_no_time_left_nothing_runs(deadline_in: float) -> None:
    plans = [_plan("r"), _plan("w", read_only=False, tool="write")]
    probe = Probe()
    results = await _run(plans, probe, deadline_in=deadline_in)
    assert probe.started() == []
    assert [r.error_type for r in results] == [ErrorCode.TIMEOUT, ErrorCode.TIMEOUT]


async def test_an_empty_turn_returns_nothing() -> None:
    assert await _run([], Probe()) == []


async def test_calls_still_running_after_the_deadline_are_cancelled_and_reported() -> None:
    release = asyncio.Event()
    cancelled: list[str] = []
    probe = Probe()

    async def execute(call: ToolCall, deadline: float) -> Envelope:
        if call.id == "stuck":
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancelled.append(call.id)
                raise
        return await probe(call, deadline)

    clock = FixedClock()
    reported: list[tuple[str, bool]] = []
    scheduler = TurnScheduler(clock=clock, overrun_grace=0.0)
    plans = [_plan("stuck"), _plan("fast"), _plan("w", read_only=False, tool="write")]
    results = await scheduler.run(
        plans,
        execute,
        deadline=clock.monotonic() + 0.01,
        on_cancel=lambda plan, started: reported.append((plan.call.id, started)),
    )
    assert [r.error_type for r in results] == [ErrorCode.TIMEOUT, None, ErrorCode.TIMEOUT]
    assert cancelled == ["stuck"]
    assert reported == [("stuck", True), ("w", False)]
    assert probe.started() == ["fast"]


async def test_a_write_still_running_after_the_deadline_is_reported_outcome_unknown() -> None:
    clock = FixedClock()

    async def execute(_call: ToolCall, _deadline: float) -> Envelope:
        await asyncio.Event().wait()
        raise AssertionError  # pragma: no cover

    scheduler = TurnScheduler(clock=clock, overrun_grace=0.0)
    plans = [_plan("w", read_only=False, tool="write")]
    [result] = await scheduler.run(plans, execute, deadline=clock.monotonic() + 0.01)
    assert result.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert not result.retryable


async def test_an_envelope_for_another_call_id_is_a_host_bug_that_stops_the_turn() -> None:
    release = asyncio.Event()
    cancelled: list[str] = []

    async def execute(call: ToolCall, _deadline: float) -> Envelope:
        if call.id == "slow":
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancelled.append(call.id)
                raise
        return Envelope(call_id="other", tool="read", status=Status.OK, summary="ok")

    clock = FixedClock()
    scheduler = TurnScheduler(clock=clock)
    with pytest.raises(HandrailError):
        await scheduler.run([_plan("slow"), _plan("bad")], execute, deadline=1e9)
    assert cancelled == ["slow"]


async def test_an_exception_from_execute_propagates_after_the_rest_is_cancelled() -> None:
    cancelled: list[str] = []

    async def execute(call: ToolCall, _deadline: float) -> Envelope:
        if call.id == "slow":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(call.id)
                raise
        await asyncio.sleep(0)
        raise ValueError(call.id)

    scheduler = TurnScheduler(clock=FixedClock())
    plans = [_plan("slow"), _plan("boom1"), _plan("boom2")]
    with pytest.raises(ValueError, match="boom"):
        await scheduler.run(plans, execute, deadline=1e9)
    assert cancelled == ["slow"]


@pytest.mark.parametrize(
    "options",
    [
        {"max_concurrency": 0},
        {"bulkheads": {"a": 0}},
        {"overrun_grace": -1.0},
        {"cancel_grace": 0.0},
    ],
)
def test_nonsensical_limits_are_a_configuration_error(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        TurnScheduler(clock=FixedClock(), **options)  # type: ignore[arg-type]


async def test_an_exception_from_the_only_call_propagates_as_it_is() -> None:
    async def execute(call: ToolCall, _deadline: float) -> Envelope:
        raise ValueError(call.id)

    reported: list[str] = []
    scheduler = TurnScheduler(clock=FixedClock())
    with pytest.raises(ValueError, match="only"):
        await scheduler.run(
            [_plan("only")],
            execute,
            deadline=1e9,
            on_cancel=lambda plan, _started: reported.append(plan.call.id),
        )
    assert reported == []
