"""Keeps bench/loop_overhead.py from rotting: one tiny round of every path, no timings."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from handrail.loop.budgets import BudgetExhausted, RunBudget
from handrail.runs import RunState

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("loop_overhead")


def _run(bench: ModuleType, tmp_path: Path, *extra: str) -> dict[str, object]:
    out = tmp_path / "result.json"
    args = ["--rounds", "2", "--calls", "3", "--runs", "1", "--warmup", "0", "--json", str(out)]
    assert bench.main([*args, *extra]) == 0
    payload: dict[str, object] = json.loads(out.read_text())
    return payload


def test_every_handrail_path_is_checked_measured_and_reported(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    payload = _run(bench, tmp_path)
    results = payload["results"]
    assert isinstance(results, dict)
    assert set(results) == {
        "handrail",
        "handrail_memory",
        "handrail_wire",
        "handrail_agent_memory",
        "handrail_agent_sqlite",
    }
    assert all(len(r["rounds_us_per_call"]) == 2 for r in results.values())
    assert results["handrail"]["ratio_vs_handrail"] == 1
    assert results["handrail_agent_memory"]["label"] == "handrail AgentLoop (MemoryStore)"
    out = capsys.readouterr().out
    assert "Handrail loop (composed, audit off)" in out
    assert "Handrail AgentLoop (MemoryStore)" in out
    assert "a SQLite file instead of a MemoryStore adds" in out
    assert "Target" not in out  # no peer measured, so no verdict


def test_the_sqlite_path_can_be_left_out(bench: ModuleType, tmp_path: Path) -> None:
    results = _run(bench, tmp_path, "--no-sqlite")["results"]
    assert isinstance(results, dict)
    assert "handrail_agent_memory" in results
    assert "handrail_agent_sqlite" not in results


async def test_the_composed_loop_runs_the_tool_once_per_scripted_call(bench: ModuleType) -> None:
    case = next(c for c in bench.handrail_cases() if c.key == "handrail")
    for calls in (0, 1, 4):
        outcome = await case.run(calls)
        assert outcome == bench.RunOutcome(text=bench.FINAL_TEXT, tool_runs=calls)


async def test_the_agent_loop_paths_run_the_tool_and_finish(bench: ModuleType) -> None:
    with contextlib.ExitStack() as stack:
        cases = bench.agent_loop_cases(stack)
        assert [c.key for c in cases] == ["handrail_agent_memory", "handrail_agent_sqlite"]
        for case in cases:
            for calls in (0, 1, 4):
                outcome = await case.run(calls)
                assert outcome == bench.RunOutcome(text=bench.FINAL_TEXT, tool_runs=calls)
        # The SQLite path shares one store: every run is in it, finished, under its own id.
        path = cases[1].run.__self__
        store = path.store()
        runs = [store.get_run(f"bench-{index}") for index in range(3)]
        assert [r.state for r in runs if r is not None] == [RunState.FINISHED] * 3
        assert store.get_run("bench-3") is None
    # Each MemoryStore path run gets a fresh store.
    memory = cases[0].run.__self__
    assert memory.store() is not memory.store()


async def test_an_agent_run_that_does_not_finish_fails_the_check(bench: ModuleType) -> None:
    tally = bench.Tally()
    path = bench.AgentLoopPath(
        gate=bench.Gate(bench._registry(tally), audit=None),
        principal=bench._principal(),
        tally=tally,
        store=bench.MemoryStore,
        budget=RunBudget(max_steps=1, deadline_seconds=60.0),
    )
    outcome = await path.run(2)
    assert outcome.text.startswith("BUDGET_EXHAUSTED")
    assert outcome.tool_runs == 1
    case = bench.Case(key="tight", label="tight", api="none", run=path.run)
    with pytest.raises(AssertionError, match="tight"):
        await bench.check(case, 2)


async def test_the_check_refuses_a_loop_that_skips_the_tool(bench: ModuleType) -> None:
    async def lazy(_calls: int) -> object:
        return bench.RunOutcome(text=bench.FINAL_TEXT, tool_runs=0)

    case = bench.Case(key="lazy", label="lazy", api="none", run=lazy)
    with pytest.raises(AssertionError, match="lazy"):
        await bench.check(case, 2)


async def test_a_tripped_budget_is_not_swallowed(bench: ModuleType) -> None:
    """The loop enforces its budget: a script longer than max_steps allows must fail."""
    loop = next(c for c in bench.handrail_cases() if c.key == "handrail").run.__self__
    original = bench.RunBudget

    def tight(**kwargs: object) -> object:
        return original(**{**kwargs, "max_steps": 1})

    bench.RunBudget = tight
    try:
        with pytest.raises(BudgetExhausted):
            await loop.run(2)
    finally:
        bench.RunBudget = original


def test_findings_compare_against_every_peer(bench: ModuleType) -> None:
    def stats(key: str, median: float, group: str = "peer") -> object:
        return bench.Stats(
            key=key,
            label=key,
            group=group,
            api="",
            median_us=median,
            min_us=median,
            fixed_us=0.0,
            vs_handrail=1.0,
            rounds_us=[median],
        )

    ours = stats("handrail", 100.0, "handrail")
    met = bench.findings([ours, stats("cheap", 150.0), stats("dear", 400.0)])
    assert met[-1] == "Target (below every peer), composed loop (audit off): met"
    missed = bench.findings([ours, stats("cheap", 90.0), stats("dear", 400.0)])
    assert missed[-1] == "Target (below every peer), composed loop (audit off): NOT met"
    assert any("cheap" in line and "NOT below" in line for line in missed)


def test_findings_judge_the_agent_loop_too(bench: ModuleType) -> None:
    def stats(key: str, median: float, group: str = "handrail") -> object:
        return bench.Stats(
            key=key,
            label=key,
            group=group,
            api="",
            median_us=median,
            min_us=median,
            fixed_us=0.0,
            vs_handrail=1.0,
            rounds_us=[median],
        )

    rows = [
        stats("handrail", 100.0),
        stats("handrail_agent_memory", 300.0),
        stats("handrail_agent_sqlite", 900.0),
        stats("peer_a", 200.0, "peer"),
    ]
    lines = bench.findings(rows)
    assert lines[-2:] == [
        "Target (below every peer), composed loop (audit off): met",
        "Target (below every peer), AgentLoop (MemoryStore): NOT met",
    ]
    peer_line = next(line for line in lines if line.startswith("peer_a"))
    assert "composed loop (audit off) is below it" in peer_line
    assert "AgentLoop (MemoryStore) is NOT below it" in peer_line
    assert any("adds +600.0 µs/call" in line for line in lines)
    # The SQLite path is reported but never held to the target.
    assert not any("SqliteStore" in line or "sqlite" in line for line in lines[-2:])
    faster = bench.findings([*rows[:3], stats("peer_a", 1000.0, "peer")])
    assert faster[-1] == "Target (below every peer), AgentLoop (MemoryStore): met"


def test_peers_are_measured_when_installed(bench: ModuleType, tmp_path: Path) -> None:
    for module in ("agents", "pydantic_ai"):
        pytest.importorskip(module)
    payload = _run(bench, tmp_path, "--peers")
    results = payload["results"]
    assert isinstance(results, dict)
    assert {"pydantic_ai", "openai_agents", "handrail_agent_memory"} <= set(results)
    assert any("AgentLoop (MemoryStore):" in line for line in payload["findings"])  # type: ignore[attr-defined]
    assert not any("skipped" in note for note in payload["notes"])  # type: ignore[attr-defined]


def test_bad_sizes_are_refused(bench: ModuleType) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--runs", "-1"])


def test_growth_with_wire_measures_every_adapter_both_ways(
    bench: ModuleType, tmp_path: Path
) -> None:
    payload = _run(bench, tmp_path, "--growth", "--wire", "--sizes", "1,2")
    keys = {row["key"] for row in payload["results"]}  # type: ignore[attr-defined]
    adapters = ("chat", "responses", "anthropic", "gemini")
    expected = {
        f"wire_{a}_{way}@{n}" for a in adapters for way in ("whole", "renderer") for n in (1, 2)
    }
    assert keys == expected | {"handrail@1", "handrail@2"}
    findings = payload["findings"]
    assert isinstance(findings, list)
    assert len(findings) == 8
    assert all("µs/call at N = 1" in line and "at N = 2" in line for line in findings)


async def test_every_rendering_loop_runs_the_tool_and_finishes(bench: ModuleType) -> None:
    for case in bench.wire_growth_cases((3, 4)):
        outcome = await case.run(case.calls)
        assert outcome == bench.RunOutcome(text=bench.FINAL_TEXT, tool_runs=case.calls)


def test_wire_needs_growth(bench: ModuleType) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--wire"])
