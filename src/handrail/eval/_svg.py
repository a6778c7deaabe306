"""Inline SVG charts for the HTML report: horizontal bars and a latency histogram.

Plain SVG markup (no script, no external reference of any kind), sized by a viewBox so
that it scales with the page; every text it draws is escaped here. Never reads a
report: it draws the numbers it is given.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

__all__ = ["Bar", "bar_chart", "histogram", "percentiles"]

_WIDTH: Final = 720
_LABEL: Final = 220
_TRACK: Final = 360
_ROW: Final = 24
_BINS: Final = 24
_HIST_HEIGHT: Final = 140
_PAD: Final = 28


@dataclass(frozen=True, kw_only=True, slots=True)
class Bar:
    """One row of a bar chart: its label, its value (None: not measured) and its text."""

    label: str
    value: float | None
    text: str


def _number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def bar_chart(bars: Sequence[Bar], *, title: str, maximum: float, tone: str) -> str:
    """Horizontal bars on one scale from 0 to `maximum`, each labelled and valued.

    `tone` is a CSS class for the bars' colour (for example which direction is better).
    """
    height = _ROW * len(bars) + 8
    scale = _TRACK / maximum if maximum > 0 else 0.0
    rows = []
    for index, bar in enumerate(bars):
        y = 4 + index * _ROW
        rows.append(
            f'<text class="label" x="{_LABEL - 8}" y="{y + 16}" text-anchor="end">'
            f"{escape(bar.label)}</text>"
            f'<rect class="track" x="{_LABEL}" y="{y + 4}" width="{_TRACK}" height="{_ROW - 8}"/>'
        )
        if bar.value is not None:
            width = max(0.0, min(float(_TRACK), bar.value * scale))
            rows.append(
                f'<rect class="bar {escape(tone)}" x="{_LABEL}" y="{y + 4}" '
                f'width="{_number(width)}" height="{_ROW - 8}"/>'
            )
        rows.append(
            f'<text class="value" x="{_LABEL + _TRACK + 8}" y="{y + 16}">{escape(bar.text)}</text>'
        )
    return (
        f'<svg class="chart" role="img" viewBox="0 0 {_WIDTH} {height}" '
        f'preserveAspectRatio="xMinYMin meet"><title>{escape(title)}</title>'
        f"{''.join(rows)}</svg>"
    )


def percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    """p50, p95 and p99 of the values (inclusive method; one value is all three)."""
    if len(values) == 1:
        return (values[0],) * 3
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[94], cuts[98]


def _bins(values: Sequence[float], top: float) -> list[int]:
    counts = [0] * _BINS
    for value in values:
        index = _BINS - 1 if top <= 0 else max(0, min(_BINS - 1, int(value / top * _BINS)))
        counts[index] += 1
    return counts


def histogram(values: Sequence[float], *, title: str) -> str:
    """The distribution of latencies (ms) from 0 to the largest, with p50/p95/p99 marked."""
    top = max(values)
    counts = _bins(values, top)
    tallest = max(counts)
    width = (_WIDTH - 2 * _PAD) / len(counts)
    base = _HIST_HEIGHT - _PAD
    parts = [f'<line class="axis" x1="{_PAD}" y1="{base}" x2="{_WIDTH - _PAD}" y2="{base}"/>']
    for index, count in enumerate(counts):
        if count:
            tall = (base - 8) * count / tallest
            parts.append(
                f'<rect class="bin" x="{_number(_PAD + index * width + 1)}" '
                f'y="{_number(base - tall)}" width="{_number(max(width - 2, 1.0))}" '
                f'height="{_number(tall)}"><title>{count}</title></rect>'
            )
    marks = zip(("p50", "p95", "p99"), percentiles(values), strict=True)
    for row, (name, value) in enumerate(marks):
        x = _PAD + (0.0 if top <= 0 else value / top * (_WIDTH - 2 * _PAD))
        parts.append(
            f'<line class="mark {name}" x1="{_number(x)}" y1="6" x2="{_number(x)}" y2="{base}"/>'
            f'<text class="mark-label" x="{_number(x + 3)}" y="{14 + 12 * row}">{name}</text>'
        )
    parts.append(
        f'<text class="value" x="{_PAD}" y="{base + 18}">0 ms</text>'
        f'<text class="value" x="{_WIDTH - _PAD}" y="{base + 18}" text-anchor="end">'
        f"{_number(top)} ms</text>"
    )
    return (
        f'<svg class="chart histogram" role="img" viewBox="0 0 {_WIDTH} {_HIST_HEIGHT}" '
        f'preserveAspectRatio="xMinYMin meet"><title>{escape(title)}</title>'
        f"{''.join(parts)}</svg>"
    )
