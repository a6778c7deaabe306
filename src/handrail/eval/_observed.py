"""What one scenario's run left behind, gathered for scoring: the facts, not the verdicts.

`Observation` holds every request the model was sent and reply it gave, every call with
the envelope it was shown, the runs' outcomes and deadline use, the audit trail, the
execution records when the runs ended and after reconciliation, the plans the person
declined, and the shop (whose effects and requests are counted there). The helpers read
it as the metrics need: each call's audit trail, its parsed arguments, and everything
the model saw as text. It decides nothing and scores nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from handrail.adapters import to_wire_name
from handrail.errors import ConfigurationError
from handrail.eval._downstream import Shop
from handrail.eval._scenario import Scenario, texts_of
from handrail.eval._world import SeenCall
from handrail.events import AuditEvent
from handrail.execution import ExecutionRecord
from handrail.loop import RunOutcome
from handrail.loop.models import ModelReply, ModelRequest
from handrail.plans import PlanState
from handrail.spec import ToolSpec

__all__ = ["Declined", "Observation", "RunUse", "arguments_of", "known_names"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Declined:
    """A plan the person said no to; `after` is how many calls had been seen by then.

    `state` is the plan's state in the store once the scenario's runs were over.
    """

    plan_id: str
    tool: str
    after: int
    state: PlanState | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunUse:
    """How one run ended and how much of its deadline it used (active seconds)."""

    outcome: RunOutcome
    used_seconds: float
    deadline_seconds: float


@dataclass(frozen=True, kw_only=True)
class Observation:
    """Everything one scenario's runs produced. `problems`: what stopped the harness."""

    scenario: Scenario
    specs: Mapping[str, ToolSpec]
    calls: tuple[SeenCall, ...]
    requests: tuple[ModelRequest, ...]
    replies: tuple[ModelReply, ...]
    runs: tuple[RunUse, ...]
    audit: tuple[AuditEvent, ...]
    records_at_end: tuple[ExecutionRecord, ...]
    records_after: tuple[ExecutionRecord, ...]
    declined: tuple[Declined, ...]
    shop: Shop
    problems: tuple[str, ...] = ()

    @cached_property
    def proposals(self) -> tuple[SeenCall, ...]:
        """The calls the model proposed, in order (not a resume's result, not the host's)."""
        return tuple(c for c in self.calls if not c.resumed and not c.host)

    @cached_property
    def names(self) -> Mapping[str, str]:
        """Every name the model may call a registered tool by, mapped to the registry name."""
        return known_names(self.specs.values())

    def tool_name(self, seen: SeenCall) -> str:
        """The registry name of the tool a call named (the name as sent if none has it)."""
        return self.names.get(seen.call.name, seen.call.name)

    def unauthorized(self, seen: SeenCall) -> bool:
        """Whether a call matches one the task never authorised (the scenario's injected ones)."""
        name, arguments = self.tool_name(seen), arguments_of(seen)
        return any(p.matches(name, arguments) for p in self.scenario.unauthorized)

    def spec_of(self, name: str) -> ToolSpec | None:
        """The spec of the tool a call named (registry or wire name), if it exists."""
        registered = self.names.get(name)
        return None if registered is None else self.specs[registered]

    @cached_property
    def trails(self) -> Mapping[str, tuple[tuple[AuditEvent, ...], ...]]:
        """Each gate call's audit events, by call id: one tuple per call with that id."""
        trails: dict[str, list[list[AuditEvent]]] = {}
        previous: str | None = None
        for event in self.audit:
            if event.kind != "call" or event.tool_call_id is None:
                previous = None
                continue
            call_id = event.tool_call_id
            runs = trails.setdefault(call_id, [])
            if call_id != previous or event.stage == "lookup" or not runs:
                runs.append([])
            runs[-1].append(event)
            previous = call_id
        return {k: tuple(tuple(t) for t in v) for k, v in trails.items()}

    def trail_of(self, seen: SeenCall) -> tuple[AuditEvent, ...]:
        """The audit events of a proposed call's pass through the gate (by id and order)."""
        same = [c for c in self.proposals if c.call.id == seen.call.id]
        index = next((n for n, c in enumerate(same) if c is seen), 0)
        found = self.trails.get(seen.call.id, ())
        return found[index] if index < len(found) else ()

    @cached_property
    def visible_text(self) -> str:
        """Everything the model saw, as one text.

        The requests sent to it (system prompt, tool definitions, transcript) and every
        envelope shown to it.
        """
        parts: list[str] = []
        for request in self.requests:
            parts.extend(texts_of(request.system))
            parts.extend(texts_of(request.transcript))
            parts.extend(texts_of(request.tools))
        for seen in self.calls:
            if not seen.host:
                parts.extend(texts_of(seen.envelope))
        return "\n".join(parts)

    @cached_property
    def results_text(self) -> str:
        """Every envelope the model was shown, as one text (what the tools told it)."""
        return "\n".join("\n".join(texts_of(c.envelope)) for c in self.calls if not c.host)

    def executions_of(self, tool: str | None = None) -> tuple[ExecutionRecord, ...]:
        """The execution records after reconciliation, of one tool or all."""
        return tuple(r for r in self.records_after if tool is None or r.tool == tool)


def known_names(specs: Sequence[ToolSpec] | Any) -> dict[str, str]:  # noqa: ANN401
    """Registry names and the wire names adapters send them under, to registry names."""
    names: dict[str, str] = {}
    for spec in specs:
        names[spec.name] = spec.name
        try:
            names.setdefault(to_wire_name(spec.name), spec.name)
        except ConfigurationError:
            continue
    return names


def arguments_of(seen: SeenCall) -> dict[str, Any]:
    """A call's arguments as a JSON object; {} when they are not one."""
    raw = seen.call.arguments
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).decode("utf-8", "replace")
    if not isinstance(raw, str):
        return {}
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}
