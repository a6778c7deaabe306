"""What an evaluation run reports: metrics per scenario and in total, as stable JSON.

The catalogue `METRICS` names every metric once, with its layer, its unit and which
direction is better, so the terminal table, the JSON, the HTML report and `compare`
agree on what a number means. A metric's value is derived from its counts where it has
them (a rate is numerator / denominator), so totals are sums of counts, not averages
of rates. `EvalReport.model_dump_json()` is the machine format; `load_report` reads it
back and refuses any other version.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from handrail.errors import ConfigurationError

__all__ = [
    "MAX_REPORT_BYTES",
    "METRICS",
    "REPORT_VERSION",
    "EvalReport",
    "Layer",
    "Metric",
    "MetricInfo",
    "ScenarioResult",
    "load_report",
    "total_metrics",
]

REPORT_VERSION: Final = 1
MAX_REPORT_BYTES: Final = 64 * 2**20
"""The largest report file `load_report` reads (a BFCL run's notes are a few MiB)."""


class Layer(enum.StrEnum):
    """The layers the seeds ask an evaluation to score, in the order reports show them."""

    SELECTION = "selection"
    ARGUMENTS = "arguments"
    SAFETY = "safety"
    EXECUTION = "execution"
    RECOVERY = "recovery"
    RESULTS = "results"
    COST = "cost"
    TRAJECTORY = "trajectory"


Kind = Literal["rate", "count", "seconds", "milliseconds", "tokens"]
Better = Literal["higher", "lower"]


class MetricInfo(BaseModel):
    """What one metric means: its layer, unit, better direction and a one-line label."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layer: Layer
    kind: Kind
    better: Better
    label: str


def _m(layer: Layer, kind: Kind, better: Better, label: str) -> MetricInfo:
    return MetricInfo(layer=layer, kind=kind, better=better, label=label)


_S, _A, _F = Layer.SELECTION, Layer.ARGUMENTS, Layer.SAFETY
_E, _R, _O = Layer.EXECUTION, Layer.RECOVERY, Layer.RESULTS
_C, _T = Layer.COST, Layer.TRAJECTORY

METRICS: Mapping[str, MetricInfo] = {
    # selection
    "correct_tool_rate": _m(_S, "rate", "higher", "calls naming the expected tool"),
    "calls_when_none_expected": _m(_S, "count", "lower", "calls made where none should be"),
    "nonexistent_tools": _m(_S, "count", "lower", "calls naming a tool that does not exist"),
    "write_as_read": _m(_S, "count", "lower", "writes the model treated as reads"),
    # arguments
    "json_pass_rate": _m(_A, "rate", "higher", "arguments that parse as JSON"),
    "schema_pass_rate": _m(_A, "rate", "higher", "arguments that pass the schema"),
    "field_accuracy": _m(_A, "rate", "higher", "expected argument fields matched"),
    # safety
    "unauthorized_blocked_rate": _m(_F, "rate", "higher", "unauthorized calls blocked"),
    "high_risk_confirmed_rate": _m(_F, "rate", "higher", "high-risk calls through confirmation"),
    "refusal_honoured_rate": _m(_F, "rate", "higher", "refusals honoured after a 'no'"),
    # execution
    "success_rate": _m(_E, "rate", "higher", "calls that succeeded"),
    "unknown_rate": _m(_E, "rate", "lower", "writes whose outcome is UNKNOWN"),
    "duplicate_side_effects": _m(_E, "count", "lower", "duplicate effects in the downstream"),
    # recovery
    "unknown_reconciled_rate": _m(_R, "rate", "higher", "UNKNOWN executions reconciled"),
    "recovery_seconds_mean": _m(_R, "seconds", "lower", "mean time to recover"),
    "recovery_seconds_p95": _m(_R, "seconds", "lower", "p95 time to recover"),
    # results
    "projection_applied_rate": _m(_O, "rate", "higher", "results projected before the model"),
    "sensitive_leaks": _m(_O, "count", "lower", "planted secrets found in what the model saw"),
    "proven_answers_rate": _m(_O, "rate", "higher", "final answers proven by records"),
    # cost
    "tool_latency_p95_ms": _m(_C, "milliseconds", "lower", "tool latency p95"),
    "tool_latency_p99_ms": _m(_C, "milliseconds", "lower", "tool latency p99"),
    "deadline_used_rate": _m(_C, "rate", "lower", "share of the run's deadline used"),
    "retries": _m(_C, "count", "lower", "retries made"),
    "retry_seconds": _m(_C, "seconds", "lower", "time spent in retries"),
    "tokens": _m(_C, "tokens", "lower", "model tokens used"),
    # trajectory
    "repeated_identical_calls": _m(_T, "count", "lower", "identical calls repeated"),
    "harmful_truncations": _m(_T, "count", "lower", "truncations that hid what was needed"),
    # BFCL categories: answers the argument matcher accepts
    "accuracy": _m(_A, "rate", "higher", "answers the BFCL checker accepts"),
}
"""Every metric a report may hold, by stable name. BFCL categories use `accuracy` and
the selection and arguments metrics."""


class Metric(BaseModel):
    """One measured value. Rates carry their counts; the value is derived from them.

    Numbers are finite and counts not negative: a report read from a file is input, and
    NaN or infinity has no place on a chart's scale.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str
    value: float | None = Field(description="None: nothing to measure (a rate of 0/0).")
    numerator: int | None = Field(default=None, ge=0)
    denominator: int | None = Field(default=None, ge=0)

    @classmethod
    def rate(cls, name: str, numerator: int, denominator: int) -> Metric:
        """A rate from its counts; its value is None when the denominator is 0."""
        value = None if denominator == 0 else numerator / denominator
        return cls(name=name, value=value, numerator=numerator, denominator=denominator)

    @classmethod
    def amount(cls, name: str, value: float | None) -> Metric:
        """A count, a duration or a number of tokens."""
        return cls(name=name, value=value)

    @property
    def info(self) -> MetricInfo:
        """This metric's entry in `METRICS`."""
        return METRICS[self.name]


class ScenarioResult(BaseModel):
    """One scenario (or one BFCL category): its metrics and whether its expectations held.

    `failures` says, in a sentence each, which expectations of the scenario did not
    hold; `notes` what else went wrong without being an expectation of the scenario
    (for a BFCL category, the questions answered wrong, and why); `latencies_ms` has
    every tool call's latency by tool, for the distributions.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str
    title: str
    passed: bool
    metrics: tuple[Metric, ...]
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    latencies_ms: Mapping[str, tuple[float, ...]] = Field(default_factory=dict)
    cases: int = Field(
        default=1, ge=0, description="Questions in a BFCL category; 1 for a scenario."
    )

    def metric(self, name: str) -> Metric | None:
        """The metric of that name, if the scenario measured it."""
        return next((m for m in self.metrics if m.name == name), None)


class EvalReport(BaseModel):
    """A whole run: what was evaluated, with what model, each scenario and the totals."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = REPORT_VERSION
    suite: str
    model: str
    started_at: datetime
    finished_at: datetime
    scenarios: tuple[ScenarioResult, ...]
    totals: tuple[Metric, ...]

    def total(self, name: str) -> Metric | None:
        """The total of that name, if any scenario measured it."""
        return next((m for m in self.totals if m.name == name), None)

    @property
    def passed(self) -> bool:
        """True when every scenario's expectations held."""
        return all(s.passed for s in self.scenarios)


def load_report(path: str | Path) -> EvalReport:
    """Read a report `handrail eval` wrote as JSON (ValidationError for anything else).

    At most `MAX_REPORT_BYTES` are read (ConfigurationError beyond): the file may be
    anything, a device that never ends included.
    """
    with Path(path).open("rb") as file:
        text = file.read(MAX_REPORT_BYTES + 1)
    if len(text) > MAX_REPORT_BYTES:
        msg = f"{path} is over {MAX_REPORT_BYTES // 2**20} MiB: not a report handrail eval wrote"
        raise ConfigurationError(msg)
    return EvalReport.model_validate_json(text)


def total_metrics(scenarios: Iterable[ScenarioResult]) -> tuple[Metric, ...]:
    """Each metric over all scenarios: counts added, rates from the added counts.

    A metric without counts (an amount) is added; one no scenario measured is absent.
    The order is that of first appearance.
    """
    sums: dict[str, list[float | int | None]] = {}
    for scenario in scenarios:
        for metric in scenario.metrics:
            kept = sums.setdefault(metric.name, [None, None, None])
            if metric.denominator is not None:
                kept[0] = (kept[0] or 0) + (metric.numerator or 0)
                kept[1] = (kept[1] or 0) + metric.denominator
            elif metric.value is not None:
                kept[2] = (kept[2] or 0) + metric.value
    totals = []
    for name, (numerator, denominator, value) in sums.items():
        if denominator is not None:
            totals.append(Metric.rate(name, int(numerator or 0), int(denominator)))
        else:
            totals.append(Metric.amount(name, value))
    return tuple(totals)
