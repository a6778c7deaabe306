"""`compare_reports`: direction-aware regressions, tolerance, scenarios that now fail."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from _hand_reports import report, scenario
from handrail.errors import ConfigurationError
from handrail.eval.compare import TOTAL, compare_reports, render_comparison
from handrail.eval.report import Metric


def _pair(
    before: list[Metric], after: list[Metric], *, passed: tuple[bool, bool] = (True, True)
) -> tuple[object, object]:
    return (
        report(scenario("s", *before, passed=passed[0]), totals=tuple(before)),
        report(scenario("s", *after, passed=passed[1]), totals=tuple(after)),
    )


def _regressed(before: Metric, after: Metric, tolerance: float = 0.0) -> bool:
    first, second = _pair([before], [after])
    comparison = compare_reports(first, second, tolerance=tolerance)  # type: ignore[arg-type]
    [total, in_scenario] = comparison.changes
    assert total.scope == TOTAL
    assert in_scenario.scope == "s"
    assert total.regressed == in_scenario.regressed
    return total.regressed


@pytest.mark.parametrize(
    ("before", "after", "regressed"),
    [
        # higher is better
        (Metric.rate("success_rate", 9, 10), Metric.rate("success_rate", 8, 10), True),
        (Metric.rate("success_rate", 8, 10), Metric.rate("success_rate", 9, 10), False),
        # lower is better
        (
            Metric.amount("duplicate_side_effects", 0),
            Metric.amount("duplicate_side_effects", 1),
            True,
        ),
        (
            Metric.amount("duplicate_side_effects", 2),
            Metric.amount("duplicate_side_effects", 1),
            False,
        ),
        (
            Metric.amount("tool_latency_p99_ms", 10.0),
            Metric.amount("tool_latency_p99_ms", 10.0),
            False,
        ),
        # nothing to compare
        (Metric.rate("success_rate", 9, 10), Metric.rate("success_rate", 0, 0), False),
    ],
)
def test_a_change_regresses_only_the_worse_way(
    before: Metric, after: Metric, regressed: bool
) -> None:
    assert _regressed(before, after) is regressed


def test_the_tolerance_is_points_for_rates_and_a_fraction_for_amounts() -> None:
    # 90% -> 88%: two points
    assert not _regressed(Metric.rate("accuracy", 90, 100), Metric.rate("accuracy", 88, 100), 0.02)
    assert _regressed(Metric.rate("accuracy", 90, 100), Metric.rate("accuracy", 87, 100), 0.02)
    # 100 ms -> 104 ms: 4%
    p95 = "tool_latency_p95_ms"
    assert not _regressed(Metric.amount(p95, 100.0), Metric.amount(p95, 104.0), 0.05)
    assert _regressed(Metric.amount(p95, 100.0), Metric.amount(p95, 106.0), 0.05)


def test_a_scenario_that_passed_and_now_fails_is_a_regression() -> None:
    before, after = _pair(
        [Metric.amount("retries", 1)], [Metric.amount("retries", 1)], passed=(True, False)
    )
    comparison = compare_reports(before, after)  # type: ignore[arg-type]
    assert comparison.newly_failed == ("s",)
    assert comparison.regressions == ()
    assert comparison.regressed


def test_scenarios_in_one_run_only_are_listed_not_judged() -> None:
    before = report(scenario("a", Metric.amount("retries", 0)), scenario("b", passed=False))
    after = report(scenario("a", Metric.amount("retries", 0)), scenario("c", passed=False))
    comparison = compare_reports(before, after)
    assert (comparison.only_before, comparison.only_after) == (("b",), ("c",))
    assert not comparison.regressed
    assert [c.metric for c in comparison.changes] == ["retries"]


def test_an_unknown_metric_and_one_measured_once_are_shown_but_not_judged() -> None:
    before = report(scenario("s", Metric.amount("tomorrows_metric", 1)))
    after = report(scenario("s", Metric.amount("tomorrows_metric", 9), Metric.amount("retries", 3)))
    comparison = compare_reports(before, after)
    assert [(c.metric, c.changed, c.regressed) for c in comparison.changes] == [
        ("retries", True, False),
        ("tomorrows_metric", True, False),
    ]
    assert comparison.changes[0].delta is None


def test_reports_of_different_suites_are_not_compared() -> None:
    with pytest.raises(ConfigurationError, match="different suites"):
        compare_reports(report(suite="builtin"), report(suite="bfcl"))


def test_the_rendering_marks_regressions_and_hides_what_did_not_change() -> None:
    before = report(
        scenario("s", Metric.rate("success_rate", 9, 10), Metric.amount("retries", 2)),
        totals=(Metric.rate("success_rate", 9, 10),),
    )
    after = report(
        scenario("s", Metric.rate("success_rate", 7, 10), Metric.amount("retries", 2)),
        totals=(Metric.rate("success_rate", 7, 10),),
        model="other",
    )
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(render_comparison(compare_reports(before, after)))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "builtin: scripted (2026-03-01T12:00:00+00:00) → other" in text
    lines = [line for line in text.splitlines() if "success_rate" in line]
    assert len(lines) == 2
    assert all("90.0% 9/10" in line and "70.0% 7/10" in line for line in lines)
    assert all("-20.0 pt" in line and "REGRESSED" in line for line in lines)
    assert "retries" not in text
    assert "2 regression(s)" in text
