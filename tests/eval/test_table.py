"""The terminal table shows what a report holds: scenarios, metrics by layer, totals."""

from __future__ import annotations

import io

from rich.console import Console

from _hand_reports import report, scenario, two_scenarios
from handrail.eval.report import Metric
from handrail.eval.table import COLUMNS_PER_TABLE, render_table


def _text(rendered: object, width: int = 240) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(rendered)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def _row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if label in line)
    return [cell.strip() for cell in line.split("│")[1:-1]]


def test_the_table_shows_each_metric_per_scenario_with_counts_and_the_totals() -> None:
    text = _text(render_table(two_scenarios()))
    assert "builtin · model scripted · 2026-03-01T12:00:00+00:00 · 3.0 s" in text
    assert "1/2 scenarios passed · FAILED" in text
    assert _row(text, "(success_rate)") == [
        "execution",
        "calls that succeeded (success_rate)",
        "75.0% 3/4",
        "50.0% 1/2",
        "66.7% 4/6",
    ]
    # a metric one scenario did not measure is blank there
    assert _row(text, "(unknown_rate)")[2:] == ["", "50.0% 1/2", "50.0% 1/2"]
    assert _row(text, "(recovery_seconds_mean)")[2:] == ["", "2.50 s", "2.50 s"]
    assert _row(text, "(tool_latency_p95_ms)")[2:] == ["12.5 ms", "", "12.5 ms"]
    assert _row(text, "lost_answer")[1:] == [
        "The lost_answer scenario",
        "1",
        "NO",
        "the UNKNOWN write was never reconciled",
    ]


def test_metrics_are_grouped_by_layer_in_the_catalogue_s_order() -> None:
    text = _text(render_table(two_scenarios()))
    order = [text.index(f"({name})") for name in ("success_rate", "unknown_rate")]
    order += [text.index("(duplicate_side_effects)"), text.index("(recovery_seconds_mean)")]
    order += [text.index("(tool_latency_p95_ms)")]
    assert order == sorted(order)
    assert _row(text, "(recovery_seconds_mean)")[0] == "recovery"


def test_a_rate_of_nothing_reads_as_its_counts() -> None:
    empty = report(scenario("idle", Metric.rate("success_rate", 0, 0)))
    assert _row(_text(render_table(empty)), "(success_rate)")[2] == "0/0"


def test_many_scenarios_are_split_over_tables_with_the_totals_in_the_last() -> None:
    many = [scenario(f"s{i}", Metric.amount("retries", i)) for i in range(COLUMNS_PER_TABLE + 2)]
    text = _text(render_table(report(*many, totals=(Metric.amount("retries", 28),))))
    rows = [line for line in text.splitlines() if "(retries)" in line]
    assert len(rows) == 2
    assert rows[0].count("│") == COLUMNS_PER_TABLE + 3  # layer, metric, six scenarios
    assert rows[1].split("│")[-2].strip() == "28"


def test_text_from_the_report_cannot_drive_the_terminal() -> None:
    sneaky = report(scenario("evil\x1b[31m", Metric.amount("retries", 1), title="\x1b]0;x\x07"))
    text = _text(render_table(sneaky))
    assert "\x1b" not in text
    assert "evil\\x1b[31m" in text
