"""How a metric reads in every view: its value as text, and which metrics a report holds.

Shared by the terminal table, the HTML page and `compare`, so that a number reads the
same wherever it is shown. Never computes a metric.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from handrail.eval.report import METRICS, EvalReport, Layer, Metric, MetricInfo

__all__ = ["OTHER", "amount_text", "info", "layer_of", "measured", "value_text"]

OTHER: Final = "other"
"""The layer shown for a metric name the catalogue does not know (a newer report)."""
NOTHING: Final = "n/a"


def info(name: str) -> MetricInfo | None:
    """The catalogue's entry for a metric name, None for a name it does not know."""
    return METRICS.get(name)


def layer_of(name: str) -> str:
    """The layer a metric is shown under."""
    found = info(name)
    return OTHER if found is None else str(found.layer)


def amount_text(name: str, value: float) -> str:
    """A value of the metric's kind as text, without counts: `87.5%`, `12.3 ms`, `4`."""
    found = info(name)
    kind = None if found is None else found.kind
    if kind == "rate":
        return f"{value:.1%}"
    if kind == "seconds":
        return f"{value:.2f} s"
    if kind == "milliseconds":
        return f"{value:.1f} ms"
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def value_text(metric: Metric | None) -> str:
    """A metric as shown in tables: a rate with its counts (`87.5% 7/8`), `n/a` for none."""
    if metric is None:
        return ""
    counts = (
        f"{metric.numerator}/{metric.denominator}"
        if metric.numerator is not None and metric.denominator is not None
        else None
    )
    if metric.value is None:
        return counts or NOTHING
    text = amount_text(metric.name, metric.value)
    return f"{text} {counts}" if counts else text


def _order(name: str) -> tuple[int, int, str]:
    names = list(METRICS)
    if name in METRICS:
        return (list(Layer).index(METRICS[name].layer), names.index(name), name)
    return (len(Layer), 0, name)


def measured(reports: Iterable[EvalReport]) -> list[str]:
    """Every metric name the reports hold (scenarios or totals), by layer, then catalogue."""
    names = {
        metric.name
        for report in reports
        for metrics in (report.totals, *(s.metrics for s in report.scenarios))
        for metric in metrics
    }
    return sorted(names, key=_order)
