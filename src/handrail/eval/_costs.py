"""Scoring recovery, cost and trajectory: times, retries, tokens and the shape of a run.

- recovery: `unknown_reconciled_rate` = records UNKNOWN when the runs ended that
  reconciliation settled / records UNKNOWN then; `recovery_seconds_mean` and `_p95` =
  from a record's last update as UNKNOWN to its update as settled, on the clock.
- cost: `tool_latency_p95_ms` / `_p99_ms` over every call that ran; `deadline_used_rate`
  = active seconds the runs used / their deadlines (in milliseconds); `retries` =
  requests the shop received beyond the first of each call (a read's call id, a
  write's idempotency key); `retry_seconds` = from the end of each call's first request
  to the end of its last; `tokens` = input and output tokens of every reply.
- trajectory: `repeated_identical_calls` = proposed calls identical (tool and canonical
  arguments) to an earlier one; `harmful_truncations` = facts the task needed that a
  cut result held and no result ever showed the model.

Percentiles are nearest-rank: always a value that was observed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from itertools import groupby

from handrail.eval._downstream import Request
from handrail.eval._observed import Observation, arguments_of
from handrail.eval.report import Metric
from handrail.execution import ExecutionStatus

__all__ = ["cost_metrics", "percentile", "recovery_metrics", "trajectory_metrics"]


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank `p`th percentile of `values` (None for none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def recovery_metrics(obs: Observation) -> tuple[tuple[float, ...], dict[str, Metric]]:
    """Seconds each UNKNOWN record took to settle, and the recovery metrics."""
    after = {r.idempotency_key: r for r in obs.records_after}
    unknown = [r for r in obs.records_at_end if r.status is ExecutionStatus.UNKNOWN]
    seconds: list[float] = []
    for record in unknown:
        settled = after.get(record.idempotency_key)
        if settled is not None and settled.status.settled:
            seconds.append((settled.updated_at - record.updated_at).total_seconds())
    return tuple(seconds), {
        "unknown_reconciled_rate": Metric.rate(
            "unknown_reconciled_rate", len(seconds), len(unknown)
        ),
        "recovery_seconds_mean": Metric.amount(
            "recovery_seconds_mean", sum(seconds) / len(seconds) if seconds else None
        ),
        "recovery_seconds_p95": Metric.amount("recovery_seconds_p95", percentile(seconds, 95)),
    }


def cost_metrics(obs: Observation, latencies_ms: Sequence[float]) -> dict[str, Metric]:
    """Latency percentiles, deadline use, retries and their time, tokens."""
    used = round(sum(run.used_seconds for run in obs.runs) * 1000)
    deadlines = round(sum(run.deadline_seconds for run in obs.runs) * 1000)
    retries = 0
    retry_seconds = 0.0

    def caller(request: Request) -> tuple[str, str]:
        return (request.operation, request.caller)

    for _, group in groupby(sorted(obs.shop.requests, key=caller), key=caller):
        attempts = sorted(group, key=lambda r: r.started)
        if len(attempts) > 1:
            retries += len(attempts) - 1
            retry_seconds += attempts[-1].ended - attempts[0].ended
    tokens = sum(r.usage.input_tokens + r.usage.output_tokens for r in obs.replies)
    return {
        "tool_latency_p95_ms": Metric.amount("tool_latency_p95_ms", percentile(latencies_ms, 95)),
        "tool_latency_p99_ms": Metric.amount("tool_latency_p99_ms", percentile(latencies_ms, 99)),
        "deadline_used_rate": Metric.rate("deadline_used_rate", used, deadlines),
        "retries": Metric.amount("retries", float(retries)),
        "retry_seconds": Metric.amount("retry_seconds", round(retry_seconds, 6)),
        "tokens": Metric.amount("tokens", float(tokens)),
    }


def trajectory_metrics(obs: Observation) -> dict[str, Metric]:
    """Repeated identical calls, and truncations that hid a needed fact."""
    seen: set[tuple[str, str]] = set()
    repeated = 0
    for proposal in obs.proposals:
        name = obs.tool_name(proposal)
        arguments = arguments_of(proposal)
        text = (
            json.dumps(arguments, sort_keys=True, separators=(",", ":"))
            if arguments
            else repr(proposal.call.arguments)
        )
        key = (name, text)
        repeated += key in seen
        seen.add(key)
    cut = [c for c in obs.proposals if c.envelope.truncated or c.envelope.omitted]
    hidden = 0
    for fact in obs.scenario.needed:
        if fact in obs.results_text:
            continue
        if any(fact in obs.shop.responses.get(c.call.id, "") for c in cut):
            hidden += 1
    return {
        "repeated_identical_calls": Metric.amount("repeated_identical_calls", float(repeated)),
        "harmful_truncations": Metric.amount("harmful_truncations", float(hidden)),
    }
