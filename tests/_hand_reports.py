"""Evaluation reports built by hand, so that views and comparisons have known contents."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from handrail.eval.report import EvalReport, Metric, ScenarioResult

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def scenario(
    name: str,
    *metrics: Metric,
    passed: bool = True,
    failures: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
    latencies: dict[str, tuple[float, ...]] | None = None,
    title: str | None = None,
) -> ScenarioResult:
    return ScenarioResult(
        name=name,
        title=title or f"The {name} scenario",
        passed=passed,
        metrics=metrics,
        failures=failures,
        notes=notes,
        latencies_ms=latencies or {},
    )


def report(
    *scenarios: ScenarioResult,
    totals: tuple[Metric, ...] = (),
    suite: str = "builtin",
    model: str = "scripted",
) -> EvalReport:
    return EvalReport(
        suite=suite,
        model=model,
        started_at=START,
        finished_at=START + timedelta(seconds=3),
        scenarios=scenarios,
        totals=totals,
    )


def two_scenarios() -> EvalReport:
    """A passing scenario and a failing one, with latencies of two tools."""
    orders = scenario(
        "duplicate_submit",
        Metric.rate("success_rate", 3, 4),
        Metric.amount("duplicate_side_effects", 0),
        Metric.amount("tool_latency_p95_ms", 12.5),
        latencies={"shop.order": (3.0, 4.5, 5.0, 12.5, 30.0), "shop.search": (1.0, 1.2)},
        title="A duplicate submit <b>bold</b>",
    )
    lost = scenario(
        "lost_answer",
        Metric.rate("success_rate", 1, 2),
        Metric.amount("duplicate_side_effects", 1),
        Metric.rate("unknown_rate", 1, 2),
        Metric.amount("recovery_seconds_mean", 2.5),
        passed=False,
        failures=("the UNKNOWN write was never reconciled",),
        notes=("a note with <angle> & ampersand",),
        latencies={"shop.order": tuple(float(i % 17 + 1) for i in range(60))},
    )
    return report(
        orders,
        lost,
        totals=(
            Metric.rate("success_rate", 4, 6),
            Metric.amount("duplicate_side_effects", 1),
            Metric.rate("unknown_rate", 1, 2),
            Metric.amount("recovery_seconds_mean", 2.5),
            Metric.amount("tool_latency_p95_ms", 12.5),
        ),
    )
