"""Tool-choice routing: the host's rules that force, require or forbid tools per request.

Owns `Rule` (a plain-Python predicate over the host's `Intent`, and the `ToolChoice` it
routes to), `Router` (rules in order; the first that matches decides, else the default)
and `Route` (the choice bound to the request's `Exposure`, checked). It never decides
exposure and never formats a provider field: each adapter's `tool_choice` does that.

A host routes one request in three steps, so that a forced tool survives the cut to
what the model can take:

    decision = router.decide(intent)
    exposure = registry.exposure(principal, ExposureRequest(
        scenario=intent.scenario, preferred=decision.preferred, capabilities=caps))
    route = decision.bind(exposure)   # RoutingError unless the choice can be kept
    tools = adapter.tool_definitions(route.tools)
    tool_choice = adapter.tool_choice(route.choice) if route.sends_choice else omitted

A forced tool that is not exposed, a required tool with nothing exposed, or a forced
choice the model cannot take raise `RoutingError`: routing never falls back to another
choice silently.

NONE still sends the exposed tools (`Route.tools`), with the provider's "none" choice:
OpenAI refuses a `tool_choice` without `tools`, Anthropic refuses a conversation whose
history holds tool_use or tool_result blocks unless tools are defined, and keeping the
same definitions keeps the prompt-cache prefix of the conversation. With no tools at
all, the host sends neither tools nor a tool choice (`Route.sends_choice` is False).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from handrail.adapters.base import ToolChoice, ToolChoiceMode
from handrail.declare.exposure import ExclusionReason, Exposure, never_exposed
from handrail.declare.registry import Registry
from handrail.errors import ConfigurationError
from handrail.spec import ToolSpec

__all__ = [
    "Decision",
    "Intent",
    "Route",
    "Router",
    "RoutingError",
    "RoutingProblem",
    "Rule",
]


class RoutingProblem(StrEnum):
    """Why a routed tool choice cannot be used for a request."""

    UNREGISTERED = "unregistered"
    """A rule forces a tool the registry does not hold."""
    NOT_EXPOSED = "not_exposed"
    """The forced tool is registered but not shown to this request's model."""
    NOTHING_EXPOSED = "nothing_exposed"
    """A tool call is required, but the request's model is shown no tool."""
    UNSUPPORTED_CHOICE = "unsupported_choice"
    """The model cannot be made to call a tool (REQUIRED or a named tool)."""


class RoutingError(ConfigurationError):
    """A routing rule asks for a tool choice the request cannot honour.

    `problem` says which; for NOT_EXPOSED, `excluded` is the reason the exposure gives
    for leaving the tool out (None when it was never registered).
    """

    def __init__(
        self,
        problem: RoutingProblem,
        message: str,
        *,
        tool: str | None = None,
        excluded: ExclusionReason | None = None,
    ) -> None:
        super().__init__(message)
        self.problem = problem
        self.tool = tool
        self.excluded = excluded


@dataclass(frozen=True, kw_only=True, slots=True)
class Intent:
    """What the host's own understanding of a request says it is about.

    Comes from the host (a classifier, the endpoint, the product surface), never from
    model output. `name` is the intent label, for example "price_question".
    """

    name: str | None = None
    scenario: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """When `matches(intent)`, the request gets `choice`; `name` identifies it in logs."""

    name: str
    matches: Callable[[Intent], bool]
    choice: ToolChoice

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigurationError("a Rule needs a non-empty name")

    @classmethod
    def on_intent(cls, intent: str, choice: ToolChoice, *, name: str | None = None) -> Rule:
        """A rule for every request whose intent is `intent`."""
        return cls(
            name=name or f"intent:{intent}",
            matches=lambda seen: seen.name == intent,
            choice=choice,
        )

    @classmethod
    def on_scenario(cls, scenario: str, choice: ToolChoice, *, name: str | None = None) -> Rule:
        """A rule for every request in `scenario`."""
        return cls(
            name=name or f"scenario:{scenario}",
            matches=lambda seen: seen.scenario == scenario,
            choice=choice,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Route:
    """A tool choice checked against the request's exposure: what to send, and with what.

    `tools` are the definitions to send (all exposed tools, also under NONE). Send
    `adapter.tool_choice(choice)` only when `sends_choice`. `parallel_calls` is the
    model's capability, for the host's parallel-call switch (for example
    `AnthropicAdapter(parallel_calls=...)` or OpenAI's `parallel_tool_calls`).
    """

    choice: ToolChoice
    rule: str | None
    exposure: Exposure
    parallel_calls: bool

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The specs whose definitions go with the request."""
        return self.exposure.included

    @property
    def sends_choice(self) -> bool:
        """Whether the request carries a tool choice: only alongside at least one tool."""
        return bool(self.exposure.included)

    def allows(self, tool: str) -> bool:
        """Whether a call of `tool` fits this route: a second check on the model's answer.

        A model (or a compatibility layer in front of one) may ignore the tool choice;
        a host can refuse such a call before it reaches the gate.
        """
        match self.choice.mode:
            case ToolChoiceMode.NONE:
                return False
            case ToolChoiceMode.TOOL:
                return tool == self.choice.tool
            case ToolChoiceMode.AUTO | ToolChoiceMode.REQUIRED:
                return tool in self.exposure


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """The tool choice the rules give an intent, before it meets an exposure."""

    choice: ToolChoice
    rule: str | None
    """The name of the rule that matched; None when the router's default applies."""

    @property
    def preferred(self) -> tuple[str, ...]:
        """Tools the exposure should keep first: the forced one, if any."""
        return (self.choice.tool,) if self.choice.tool is not None else ()

    def bind(self, exposure: Exposure) -> Route:
        """The route for a request with this exposure; RoutingError if it cannot be kept."""
        choice = self.choice
        capabilities = exposure.request.capabilities
        forcing = choice.mode in {ToolChoiceMode.REQUIRED, ToolChoiceMode.TOOL}
        if forcing and not capabilities.supports_forced_choice:
            raise RoutingError(
                RoutingProblem.UNSUPPORTED_CHOICE,
                f"rule {self.rule!r} routes to {choice.mode.value}, which this model cannot take",
                tool=choice.tool,
            )
        if choice.tool is not None and choice.tool not in exposure:
            reason = exposure.reason(choice.tool)
            raise RoutingError(
                RoutingProblem.NOT_EXPOSED,
                f"rule {self.rule!r} forces {choice.tool!r}, which this request does not "
                f"expose ({reason.value if reason else 'not registered'})",
                tool=choice.tool,
                excluded=reason,
            )
        if forcing and not exposure.included:
            raise RoutingError(
                RoutingProblem.NOTHING_EXPOSED,
                f"rule {self.rule!r} requires a tool call, but this request exposes no tool",
            )
        return Route(
            choice=choice,
            rule=self.rule,
            exposure=exposure,
            parallel_calls=capabilities.supports_parallel_calls,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Router:
    """Rules in order; the first that matches an intent decides, else `default`.

    Evaluation is deterministic: rules are pure predicates tried in the order given,
    and rule names are unique so that a logged decision names exactly one rule.
    """

    rules: tuple[Rule, ...] = ()
    default: ToolChoice = field(default_factory=ToolChoice)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        repeated = sorted(name for name, n in Counter(r.name for r in self.rules).items() if n > 1)
        if repeated:
            raise ConfigurationError(f"routing rule names must be unique: {repeated}")

    @property
    def forced_tools(self) -> frozenset[str]:
        """Every tool some rule (or the default) forces."""
        choices = (*(rule.choice for rule in self.rules), self.default)
        return frozenset(choice.tool for choice in choices if choice.tool is not None)

    def check(self, registry: Registry) -> None:
        """At start-up: every forced tool is registered and could be exposed to someone.

        Raises RoutingError (UNREGISTERED, or NOT_EXPOSED for a forbidden or disabled
        tool) instead of waiting for the first request that matches the rule.
        """
        for name in sorted(self.forced_tools):
            if name not in registry:
                raise RoutingError(
                    RoutingProblem.UNREGISTERED,
                    f"a routing rule forces {name!r}, which is not registered",
                    tool=name,
                )
            reason = never_exposed(registry.get(name).spec)
            if reason is not None:
                raise RoutingError(
                    RoutingProblem.NOT_EXPOSED,
                    f"a routing rule forces {name!r}, which is {reason.value}",
                    tool=name,
                    excluded=reason,
                )

    def decide(self, intent: Intent) -> Decision:
        """The choice of the first rule that matches `intent`, else the default."""
        for rule in self.rules:
            if rule.matches(intent):
                return Decision(choice=rule.choice, rule=rule.name)
        return Decision(choice=self.default, rule=None)

    def route(self, intent: Intent, exposure: Exposure) -> Route:
        """`decide(intent).bind(exposure)`; see `Decision.preferred` to keep a forced tool."""
        return self.decide(intent).bind(exposure)
