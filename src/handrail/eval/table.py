"""The terminal view of a report: the scenarios, then every layer's metrics, with totals.

One summary table (each scenario's cases, whether its expectations held and the first
failure) and the metrics as rows grouped by layer, with the scenarios as columns (a
few per table, so that they stay readable) and the totals last. Rates show their
counts. Text from the report is shown with its control characters escaped. Never
computes a metric: it shows what the report holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from rich.console import Group
from rich.table import Table
from rich.text import Text

from handrail.eval._format import info, layer_of, measured, value_text
from handrail.text import shown

if TYPE_CHECKING:
    from rich.console import RenderableType

    from handrail.eval.report import EvalReport, Metric, ScenarioResult

__all__ = ["COLUMNS_PER_TABLE", "render_table"]

COLUMNS_PER_TABLE: Final = 6
"""Scenarios side by side in one metrics table; more make further tables."""
_FIRST_FAILURES: Final = 1


def _heading(report: EvalReport) -> Text:
    passed = sum(s.passed for s in report.scenarios)
    seconds = (report.finished_at - report.started_at).total_seconds()
    verdict = ("all passed", "green") if report.passed else ("FAILED", "bold red")
    heading = Text()
    heading.append(shown(report.suite), style="bold")
    heading.append(f" · model {shown(report.model)} · ")
    heading.append(report.started_at.isoformat(timespec="seconds"))
    heading.append(f" · {seconds:.1f} s · {passed}/{len(report.scenarios)} scenarios passed · ")
    heading.append(verdict[0], style=verdict[1])
    return heading


def _summary(report: EvalReport) -> Table:
    table = Table(title="Scenarios", title_justify="left")
    for column in ("scenario", "title", "cases", "passed", "failures"):
        table.add_column(column, overflow="fold")
    for scenario in report.scenarios:
        failures = list(scenario.failures[:_FIRST_FAILURES])
        rest = len(scenario.failures) - len(failures)
        if rest:
            failures.append(f"(+{rest} more)")
        table.add_row(
            Text(shown(scenario.name)),
            Text(shown(scenario.title)),
            Text(str(scenario.cases)),
            Text("yes", style="green") if scenario.passed else Text("NO", style="bold red"),
            Text(shown(" ".join(failures))),
        )
    return table


def _metrics_table(
    names: Sequence[str],
    scenarios: Sequence[ScenarioResult],
    totals: Sequence[Metric] | None,
) -> Table:
    table = Table(title="Metrics", title_justify="left")
    table.add_column("layer", style="dim")
    table.add_column("metric", overflow="fold")
    for scenario in scenarios:
        table.add_column(Text(shown(scenario.name)), justify="right", overflow="fold")
    if totals is not None:
        table.add_column("total", justify="right", style="bold")
    by_name = [{m.name: m for m in scenario.metrics} for scenario in scenarios]
    total = {m.name: m for m in totals or ()}
    layer = None
    for name in names:
        if layer is not None and layer_of(name) != layer:
            table.add_section()
        shown_layer = "" if layer_of(name) == layer else layer_of(name)
        layer = layer_of(name)
        found = info(name)
        label = (
            Text(shown(name))
            if found is None
            else Text.assemble(found.label, (f" ({name})", "dim"))
        )
        cells = [Text(value_text(metrics.get(name))) for metrics in by_name]
        if totals is not None:
            cells.append(Text(value_text(total.get(name))))
        table.add_row(Text(shown(shown_layer)), label, *cells)
    return table


def render_table(report: EvalReport) -> RenderableType:
    """The report as tables: scenarios, then metrics by layer with the totals last."""
    names = measured([report])
    scenarios = report.scenarios
    chunks = [
        scenarios[start : start + COLUMNS_PER_TABLE]
        for start in range(0, len(scenarios), COLUMNS_PER_TABLE)
    ] or [()]
    tables = [
        _metrics_table(names, chunk, report.totals if index == len(chunks) - 1 else None)
        for index, chunk in enumerate(chunks)
    ]
    return Group(_heading(report), _summary(report), *tables)
