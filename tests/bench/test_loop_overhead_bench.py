"""Keeps bench/loop_overhead.py from rotting: one tiny round of every path, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from handrail.loop.budgets import BudgetExhausted

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
    assert set(results) == {"handrail", "handrail_memory", "handrail_wire"}
    assert all(len(r["rounds_us_per_call"]) == 2 for r in results.values())
    assert results["handrail"]["ratio_vs_handrail"] == 1
    out = capsys.readouterr().out
    assert "Handrail loop (composed, audit off)" in out
    assert "Target" not in out  # no peer measured, so no verdict


async def test_the_composed_loop_runs_the_tool_once_per_scripted_call(bench: ModuleType) -> None:
    case = next(c for c in bench.handrail_cases() if c.key == "handrail")
    for calls in (0, 1, 4):
        outcome = await case.run(calls)
        assert outcome == bench.RunOutcome(text=bench.FINAL_TEXT, tool_runs=calls)


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
    assert met[-1] == "Target (below every peer): met"
    missed = bench.findings([ours, stats("cheap", 90.0), stats("dear", 400.0)])
    assert missed[-1] == "Target (below every peer): NOT met"
    assert any("cheap" in line and "NOT below" in line for line in missed)


def test_peers_are_measured_when_installed(bench: ModuleType, tmp_path: Path) -> None:
    for module in ("agents", "pydantic_ai"):
        pytest.importorskip(module)
    payload = _run(bench, tmp_path, "--peers")
    results = payload["results"]
    assert isinstance(results, dict)
    assert {"pydantic_ai", "openai_agents"} <= set(results)
    assert not any("skipped" in note for note in payload["notes"])  # type: ignore[attr-defined]


def test_bad_sizes_are_refused(bench: ModuleType) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--runs", "-1"])
