"""Wall time of one turn of independent reads, against its slowest and its summed calls.

Five read tools each wait 100 ms (`asyncio.sleep`), as an I/O-bound read would. One
turn calls all five; the turn's wall time is compared with max(tᵢ), the longest single
call (target ≤ 1.05: the reads overlap), and with sum(tᵢ), what running them one after
the other would take. tᵢ is each call's own duration, measured around `execute`.

Paths, each measured per round, their order rotated every round:

    scheduler   TurnScheduler with an execute that awaits the tool directly
    gate        TurnScheduler with execute = Gate.handle (lookup, checks, shaping, audit off)
    batch       Gate.handle_batch as it is today, for comparison (tᵢ not measurable: n/a)

Reported per path: medians over rounds of the wall time and of both ratios, and the
median wall time over the nominal delay (the only ratio the batch path has). Nothing here
asserts a time.

    .venv/bin/python bench/parallel_reads.py
    .venv/bin/python bench/parallel_reads.py --rounds 20 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from handrail import Envelope, Gate, Principal, Registry, RiskLevel, Status, ToolCall, tool
from handrail.clock import SystemClock
from handrail.declare.definition import Tool
from handrail.scheduler import CallPlan, TurnScheduler

PRINCIPAL = Principal(user_id="bench", tenant_id="t1")
TARGET = 1.05


@dataclass
class Measured:
    """One measured path: per round, the wall time and the calls' own durations."""

    name: str
    nominal: float
    walls: list[float] = field(default_factory=list)
    to_max: list[float] = field(default_factory=list)
    to_sum: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        def median(values: list[float]) -> float | None:
            return statistics.median(values) if values else None

        return {
            "wall_ms_median": 1000 * statistics.median(self.walls),
            "wall_ms_min": 1000 * min(self.walls),
            "ratio_to_max_median": median(self.to_max),
            "ratio_to_sum_median": median(self.to_sum),
            "ratio_to_nominal_max_median": statistics.median(self.walls) / self.nominal,
            "rounds_wall_ms": [1000 * w for w in self.walls],
        }


def _read_tools(count: int, delay: float) -> list[Tool]:
    def make(index: int) -> Tool:
        @tool(risk=RiskLevel.L1_INTERNAL_READ, name=f"read_{index}")
        async def read() -> dict[str, int]:
            """Wait like an I/O-bound read, then answer."""
            await asyncio.sleep(delay)
            return {"reader": index}

        return read

    return [make(i) for i in range(count)]


Turn = Callable[[list[float]], Awaitable[list[Envelope]]]


def _paths(count: int, delay: float) -> dict[str, Turn]:
    tools = _read_tools(count, delay)
    registry = Registry()
    for t in tools:
        registry.register(t)
    clock = SystemClock()
    gate = Gate(registry, clock=clock)
    scheduler = TurnScheduler(clock=clock)
    calls = [
        ToolCall(id=f"call_{i}", name=t.spec.name, arguments="{}") for i, t in enumerate(tools)
    ]
    plans = [CallPlan(call=c, read_only=True, tool=c.name) for c in calls]
    by_name = {t.spec.name: t for t in tools}

    async def direct(call: ToolCall, _deadline: float) -> Envelope:
        found = by_name[call.name]
        data = await found.invoke(found.bind({}), None)
        return Envelope(call_id=call.id, tool=call.name, status=Status.OK, summary="ok", data=data)

    async def through_gate(call: ToolCall, deadline: float) -> Envelope:
        return await gate.handle(call, PRINCIPAL, timeout=deadline - clock.monotonic())

    def scheduled(execute: Callable[[ToolCall, float], Awaitable[Envelope]]) -> Turn:
        async def turn(durations: list[float]) -> list[Envelope]:
            async def timed(call: ToolCall, deadline: float) -> Envelope:
                start = time.perf_counter()
                try:
                    return await execute(call, deadline)
                finally:
                    durations.append(time.perf_counter() - start)

            return await scheduler.run(plans, timed, deadline=clock.monotonic() + 30.0)

        return turn

    async def batch(_durations: list[float]) -> list[Envelope]:
        return await gate.handle_batch(calls, PRINCIPAL, timeout=30.0)

    return {"scheduler": scheduled(direct), "gate": scheduled(through_gate), "batch": batch}


async def _measure(rounds: int, count: int, delay: float) -> dict[str, Measured]:
    turns = _paths(count, delay)
    results = {name: Measured(name, nominal=delay) for name in turns}
    names = list(turns)
    for name in names:  # warm-up and correctness check
        envelopes = await turns[name]([])
        if [e.status for e in envelopes] != [Status.OK] * count:
            msg = f"{name}: a read did not succeed"
            raise RuntimeError(msg)
    for round_no in range(rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            durations: list[float] = []
            start = time.perf_counter()
            await turns[name](durations)
            wall = time.perf_counter() - start
            measured = results[name]
            measured.walls.append(wall)
            if durations:
                measured.to_max.append(wall / max(durations))
                measured.to_sum.append(wall / sum(durations))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tools", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.1, help="seconds per read")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = parser.parse_args(argv)
    results = asyncio.run(_measure(args.rounds, args.tools, args.delay))
    print(
        f"{args.tools} reads of {1000 * args.delay:.0f} ms, {args.rounds} rounds (medians)\n"
        f"{'path':<10} {'wall ms':>9} {'/max(ti)':>9} {'/sum(ti)':>9} {'/delay':>9}",
    )
    for measured in results.values():
        s = measured.summary()
        to_max, to_sum = s["ratio_to_max_median"], s["ratio_to_sum_median"]
        print(
            f"{measured.name:<10} {s['wall_ms_median']:>9.1f} "
            f"{'n/a' if to_max is None else f'{to_max:.3f}':>9} "
            f"{'n/a' if to_sum is None else f'{to_sum:.3f}':>9} "
            f"{s['ratio_to_nominal_max_median']:>9.3f}",
        )
    if args.json is not None:
        payload = {
            "benchmark": "parallel_reads",
            "tools": args.tools,
            "delay_s": args.delay,
            "rounds": args.rounds,
            "target_ratio_to_max": TARGET,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "results": {name: m.summary() for name, m in results.items()},
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
