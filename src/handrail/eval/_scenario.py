"""What a scenario is: a task, the reference cassette, what it expects, what the person does.

`Scenario` is a value: the user's task (and follow-up messages in the same
conversation), the scripted model's reference cassette (a script for
`ScriptedModelClient`, never a real model), the calls the task needs (`Expected`), the
calls nobody authorised (`CallPattern`), the person's answer to each plan
(`Decision`), arranged faults and host events, and the checks that decide whether it
passed. The cassette helpers (`call`, `reply`, `answer`, `answer_citing_plan`) write
replies as an OpenAI model sends them. It never runs anything: the harness does.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from handrail.calls import ToolCall
from handrail.eval._downstream import PLANTED_SECRETS, Shop
from handrail.eval._tools import AGENT
from handrail.loop.budgets import RunBudget
from handrail.loop.models import SCRIPTED_MODEL, ModelReply, ModelRequest, ScriptedStep, Usage
from handrail.principal import Principal

if TYPE_CHECKING:
    from handrail.authz.policy import Policy
    from handrail.declare.definition import Tool

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_LATENCY",
    "USAGE",
    "CallPattern",
    "Check",
    "Decision",
    "Expected",
    "Host",
    "HostEvent",
    "Scenario",
    "answer",
    "answer_citing_plan",
    "call",
    "last_plan_id",
    "reply",
    "texts_of",
]

DEFAULT_BUDGET = RunBudget(max_steps=12, deadline_seconds=120.0, max_tool_calls=30)
"""Every run of a scenario: twelve model turns, two minutes of active time, 30 calls."""

DEFAULT_LATENCY: Mapping[str, float] = MappingProxyType(
    {
        "customers": 0.040,
        "orders": 0.030,
        "messages": 0.020,
        "shipments": 0.050,
        "refund": 0.200,
        "ticket": 0.120,
    }
)
"""The shop's simulated time per operation, in seconds, spent on the scenario's clock."""

USAGE = Usage(input_tokens=300, output_tokens=40)
"""What each scripted reply reports it cost, unless its cassette says otherwise."""

_PLAN_ID = re.compile(r'"plan_id"\s*:\s*"([^"\\]{1,200})"')

Check = Callable[[Any], "str | None"]
"""A scenario's expectation: a function of its `_observed.Observation` (typed `Any` here
so that the scenario, below the observation, does not depend on it) that returns None
when it held, else one sentence saying what did not (see `_checks`)."""


class Host(Protocol):
    """What a host event may use of the scenario's world (`_world.World`)."""

    @property
    def shop(self) -> Shop:
        """The downstream shop."""
        ...

    @property
    def scenario(self) -> Scenario:
        """The scenario being played."""
        ...

    async def execute_again(self, plan_id: str) -> object:
        """Execute a confirmed plan again, as a second submission would."""
        ...


HostEvent = Callable[[Host, str], Awaitable[None]]
"""Something that happens outside the model, given the world and the plan id."""


class Decision(enum.StrEnum):
    """What the person answers when a plan asks for their confirmation."""

    CONFIRM = "confirm"
    DECLINE = "decline"


def _frozen(value: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True, kw_only=True, slots=True)
class Expected:
    """A call the task needs: its tool, and the argument values that must be right."""

    tool: str
    arguments: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", _frozen(self.arguments))


@dataclass(frozen=True, kw_only=True, slots=True)
class CallPattern:
    """Calls of `tool` whose arguments include these values (all calls of it if none)."""

    tool: str
    arguments: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", _frozen(self.arguments))

    def matches(self, name: str, arguments: Mapping[str, Any]) -> bool:
        """Whether a call of `name` with `arguments` is one of these."""
        return name == self.tool and all(
            k in arguments and arguments[k] == v for k, v in self.arguments.items()
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    """One evaluation scenario, run in a world of its own (store, shop, clock).

    `task` starts the first run; each of `follow_ups` starts another run in the same
    conversation once the previous one stopped. `cassette` is what the scripted model
    replies across all of them, in order. `expected` are the calls the task needs (none:
    no call should be made); `unauthorized` the calls nobody authorised (injected,
    another's, forbidden). `person` answers the plans in order (DECLINE once it runs
    out). `setup` arranges the shop; `after_confirm` runs between a confirmation and
    the execution, `after_resume` after it. `needed` are facts the task needs from
    results (for truncations); `secrets` the planted values no model may see. `checks`
    decide whether the scenario passed; `seeds` name the items of the seeds' sample list
    it covers. UNKNOWN writes are reconciled `reconcile_after` seconds after the runs.
    """

    name: str
    title: str
    task: str
    cassette: tuple[ScriptedStep, ...]
    expected: tuple[Expected, ...] = ()
    unauthorized: tuple[CallPattern, ...] = ()
    person: tuple[Decision, ...] = ()
    follow_ups: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    seeds: tuple[str, ...] = ()
    needed: tuple[str, ...] = ()
    secrets: tuple[str, ...] = PLANTED_SECRETS
    setup: Callable[[Shop], None] | None = None
    after_confirm: HostEvent | None = None
    after_resume: HostEvent | None = None
    extra_tools: Callable[[Shop], Sequence[Tool]] | None = None
    policy: Callable[[Shop], Policy] | None = None
    latency: Mapping[str, float] = field(default_factory=lambda: DEFAULT_LATENCY)
    principal: Principal = AGENT
    budget: RunBudget = DEFAULT_BUDGET
    reconcile_after: float = 30.0


# --- cassette helpers --------------------------------------------------------------------------


def call(call_id: str, tool: str, /, **arguments: object) -> ToolCall:
    """A scripted call with JSON-text arguments, as OpenAI models send them."""
    return ToolCall(id=call_id, name=tool, arguments=json.dumps(arguments), provider="scripted")


def reply(*calls: ToolCall, text: str | None = None, usage: Usage = USAGE) -> ModelReply:
    """One scripted reply: calls, or text (a final answer)."""
    return ModelReply(
        calls=calls,
        text=text,
        usage=usage,
        finish_reason="tool_calls" if calls else "stop",
        model=SCRIPTED_MODEL,
    )


def answer(state: str, message: str, *evidence: Mapping[str, str]) -> ModelReply:
    """A scripted final answer: the JSON object the loop asks for."""
    document = {"state": state, "message": message, "evidence": [dict(e) for e in evidence]}
    return reply(text=json.dumps(document))


def last_plan_id(request: ModelRequest) -> str | None:
    """The last plan id the model was shown in this request's transcript, if any."""
    found = None
    for text in texts_of(request.transcript):
        for match in _PLAN_ID.finditer(text):
            found = match.group(1)
    return found


def answer_citing_plan(state: str, message: str, tool: str) -> ScriptedStep:
    """A final answer citing the plan the model was last shown, as a model would copy it."""

    def step(request: ModelRequest) -> ModelReply:
        plan_id = last_plan_id(request)
        if plan_id is None:
            return answer("need_information", "I could not find the plan.")
        return answer(state, message, {"tool": tool, "plan_id": plan_id})

    return step


def texts_of(value: object) -> list[str]:
    """Every string inside turns, calls and envelopes, in order (keys of mappings too)."""
    out: list[str] = []
    _collect(value, out, 0)
    return out


_MAX_DEPTH = 64


def _collect(item: object, out: list[str], depth: int) -> None:
    if depth > _MAX_DEPTH:
        return
    if isinstance(item, str):
        out.append(item)
    elif isinstance(item, bytes | bytearray):
        out.append(bytes(item).decode("utf-8", "replace"))
    elif isinstance(item, Mapping):
        for key, sub in item.items():
            _collect(key, out, depth + 1)
            _collect(sub, out, depth + 1)
    elif isinstance(item, list | tuple | set | frozenset):
        for sub in item:
            _collect(sub, out, depth + 1)
    elif hasattr(item, "__dataclass_fields__"):
        for name in item.__dataclass_fields__:
            _collect(getattr(item, name), out, depth + 1)
