"""The HTML report: one self-contained page with charts that needs no network.

Everything is in the page: CSS in a `<style>`, charts as inline SVG (`_svg`), no
script, font, image or link to anything outside it, and a Content-Security-Policy
that would block any load if one slipped in. It shows the run (suite, model, times,
verdict), the totals, a bar chart per metric with one bar per scenario (grouped by
layer), the latency distribution of each tool, and each scenario's failures and
notes. Every text from the report is escaped. Never computes a metric.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import TYPE_CHECKING, Final

from handrail.eval._format import info, layer_of, measured, value_text
from handrail.eval._svg import Bar, bar_chart, histogram, percentiles

if TYPE_CHECKING:
    from handrail.eval.report import EvalReport, ScenarioResult

__all__ = ["render_html"]

_POLICY: Final = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_STYLE: Final = """
:root { color-scheme: light; --ink: #1d232a; --muted: #5b6570; --line: #d5dbe1;
  --good: #1f7a5c; --bad: #b3261e; --higher: #2f6db3; --lower: #b36b00; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--ink); background: #f7f8fa; }
main { max-width: 1080px; margin: 0 auto; padding: 24px; }
h1 { font-size: 1.6em; margin: 0 0 4px; }
h2 { font-size: 1.25em; margin: 32px 0 8px; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.05em; margin: 20px 0 4px; text-transform: capitalize; }
h4 { font-size: .95em; margin: 14px 0 2px; font-weight: 600; }
.meta { color: var(--muted); margin: 0; }
.verdict { display: inline-block; padding: 2px 10px; border-radius: 10px; color: #fff;
  font-weight: 600; }
.verdict.passed { background: var(--good); } .verdict.failed { background: var(--bad); }
table { border-collapse: collapse; width: 100%; background: #fff; margin: 8px 0; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left;
  vertical-align: top; }
td.number { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.yes { color: var(--good); font-weight: 600; } .no { color: var(--bad); font-weight: 600; }
code { font-size: .9em; color: var(--muted); }
figure { margin: 0 0 12px; background: #fff; border: 1px solid var(--line);
  border-radius: 6px; padding: 8px 12px; }
figcaption { color: var(--muted); font-size: .9em; }
svg.chart { width: 100%; height: auto; display: block; }
svg .label, svg .value, svg .mark-label { font: 12px system-ui, sans-serif; fill: var(--ink); }
svg .track { fill: #edf0f3; } svg .bar.higher { fill: var(--higher); }
svg .bar.lower { fill: var(--lower); } svg .bar.neutral { fill: var(--muted); }
svg .bin { fill: var(--higher); } svg .axis { stroke: var(--muted); }
svg .mark { stroke: var(--bad); stroke-dasharray: 3 2; }
ul { margin: 4px 0; padding-left: 20px; }
details summary { cursor: pointer; color: var(--muted); }
"""


def _head(report: EvalReport) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>Handrail evaluation: {escape(report.suite)} · {escape(report.model)}</title>"
        f"<style>{_STYLE}</style></head><body><main>"
    )


def _header(report: EvalReport) -> str:
    passed = sum(s.passed for s in report.scenarios)
    seconds = (report.finished_at - report.started_at).total_seconds()
    verdict = (
        '<span class="verdict passed">all passed</span>'
        if report.passed
        else '<span class="verdict failed">failed</span>'
    )
    return (
        f"<header><h1>Handrail evaluation: {escape(report.suite)}</h1>"
        f'<p class="meta">model <strong>{escape(report.model)}</strong> · started '
        f"{escape(report.started_at.isoformat(timespec='seconds'))} · {seconds:.1f} s · "
        f"{passed} of {len(report.scenarios)} scenarios passed {verdict}</p></header>"
    )


def _label(name: str) -> str:
    found = info(name)
    shown = name if found is None else found.label
    return f"{escape(shown)} <code>{escape(name)}</code>"


def _totals(report: EvalReport) -> str:
    order = measured([report])
    rows = "".join(
        f"<tr><td>{escape(layer_of(m.name))}</td><td>{_label(m.name)}</td>"
        f'<td class="number">{escape(value_text(m))}</td></tr>'
        for m in sorted(report.totals, key=lambda m: order.index(m.name))
    )
    return (
        '<section id="totals"><h2>Totals</h2>'
        "<table><thead><tr><th>layer</th><th>metric</th><th>total</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def _tone(name: str) -> str:
    found = info(name)
    return "neutral" if found is None else found.better


def _metric_figure(name: str, scenarios: Iterable[ScenarioResult]) -> str:
    bars = []
    for scenario in scenarios:
        metric = scenario.metric(name)
        if metric is not None:
            bars.append(Bar(label=scenario.name, value=metric.value, text=value_text(metric)))
    found = info(name)
    if found is not None and found.kind == "rate":
        maximum = 1.0
    else:
        maximum = max((bar.value for bar in bars if bar.value is not None), default=0.0)
    better = "" if found is None else f" · {found.better} is better"
    chart = bar_chart(bars, title=f"{name} by scenario", maximum=maximum, tone=_tone(name))
    return (
        f'<figure class="metric" data-metric="{escape(name)}"><h4>{_label(name)}</h4>{chart}'
        f"<figcaption>{len(bars)} scenario(s){escape(better)}</figcaption></figure>"
    )


def _bars(report: EvalReport) -> str:
    sections = []
    layer = None
    for name in measured([report]):
        if not any(s.metric(name) is not None for s in report.scenarios):
            continue
        if layer_of(name) != layer:
            layer = layer_of(name)
            sections.append(f"<h3>{escape(layer)}</h3>")
        sections.append(_metric_figure(name, report.scenarios))
    body = "".join(sections) or "<p>No scenario measured anything.</p>"
    return f'<section id="metrics"><h2>Metrics by scenario</h2>{body}</section>'


def _latencies(report: EvalReport) -> str:
    by_tool: dict[str, list[float]] = {}
    for scenario in report.scenarios:
        for tool, latencies in scenario.latencies_ms.items():
            by_tool.setdefault(tool, []).extend(latencies)
    figures = []
    for tool, values in sorted(by_tool.items()):
        if not values:
            continue
        p50, p95, p99 = percentiles(values)
        caption = (
            f"{len(values)} call(s) · p50 {p50:.1f} ms · p95 {p95:.1f} ms · "
            f"p99 {p99:.1f} ms · max {max(values):.1f} ms"
        )
        figures.append(
            f'<figure class="latency" data-tool="{escape(tool)}"><h4>{escape(tool)}</h4>'
            f"{histogram(values, title=f'latency of {tool}')}"
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )
    body = "".join(figures) or "<p>No tool latencies were recorded in this run.</p>"
    return f'<section id="latency"><h2>Latency distribution per tool</h2>{body}</section>'


def _items(texts: Iterable[str]) -> str:
    return "".join(f"<li>{escape(text)}</li>" for text in texts)


def _scenario_row(scenario: ScenarioResult) -> str:
    verdict = '<span class="yes">yes</span>' if scenario.passed else '<span class="no">no</span>'
    failures = f"<ul>{_items(scenario.failures)}</ul>" if scenario.failures else ""
    notes = (
        f"<details><summary>{len(scenario.notes)} note(s)</summary>"
        f"<ul>{_items(scenario.notes)}</ul></details>"
        if scenario.notes
        else ""
    )
    return (
        f'<tr data-scenario="{escape(scenario.name)}"><td>{escape(scenario.name)}</td>'
        f"<td>{escape(scenario.title)}</td>"
        f'<td class="number">{scenario.cases}</td><td>{verdict}</td>'
        f"<td>{failures}{notes}</td></tr>"
    )


def _scenarios(report: EvalReport) -> str:
    rows = "".join(_scenario_row(s) for s in report.scenarios)
    return (
        '<section id="scenarios"><h2>Scenarios</h2><table><thead><tr><th>scenario</th>'
        "<th>title</th><th>cases</th><th>passed</th><th>failures and notes</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def render_html(report: EvalReport) -> str:
    """The whole page: metric bars per scenario, latency distribution per tool, totals."""
    return "".join(
        (
            _head(report),
            _header(report),
            _totals(report),
            _bars(report),
            _latencies(report),
            _scenarios(report),
            "</main></body></html>\n",
        )
    )
