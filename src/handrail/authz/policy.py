"""Authorization: may this Principal use this tool, and with these arguments?

Two checks. The coarse one (`check_permissions`: the tool's required permissions) runs
before stage 3, as the gate's `permission` stage, so a caller who may not use a tool
learns nothing about its data. Stage 4, a pluggable `Policy`, then decides allow,
confirm, approve or deny for the resource the arguments name; the `PolicyEngine` is
the production Policy: rules per tool in plain Python, resources loaded by
tenant-scoped resolvers. Neither trusts anything the model wrote, nor a tool's own
label without checking.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Protocol, TypeAlias

from handrail.errors import ConfigurationError, ErrorCode, Refusal
from handrail.principal import Principal
from handrail.spec import ConfirmationMode, ConfirmationPolicy, SideEffect, ToolSpec

__all__ = [
    "PRECEDENCE",
    "AllowAll",
    "Condition",
    "Decision",
    "Facts",
    "Outcome",
    "Policy",
    "PolicyEngine",
    "Resolved",
    "ResourceResolver",
    "Rule",
    "all_of",
    "any_of",
    "check_permissions",
    "denied",
    "describe",
    "holds",
    "is_owner",
    "lacks",
    "negate",
    "refusal_for",
]


class Outcome(StrEnum):
    """What a policy decided."""

    ALLOW = "allow"
    CONFIRM = "confirm"
    APPROVE = "approve"
    DENY = "deny"
    NOT_FOUND = "not_found"
    """The target does not exist for this principal (its tenant and data scope).

    Never a rule's outcome: the engine answers it when a resolver finds nothing, before
    any rule runs, so that no rule can tell "someone else's" from "no such thing".
    """


PRECEDENCE: tuple[Outcome, ...] = (Outcome.DENY, Outcome.APPROVE, Outcome.CONFIRM, Outcome.ALLOW)
"""Rule outcomes, strictest first: when several rules hold, the strictest decides."""

_SEVERITY = {outcome: len(PRECEDENCE) - rank for rank, outcome in enumerate(PRECEDENCE)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """A policy's answer, with the reason (for people) and the rule that fired (for audit)."""

    outcome: Outcome
    reason: str
    rule: str
    resource_key: str | None = None
    """The real resource the decision was about (for example `order:ORD-1001`), when a
    resolver loaded one; lets a conversation notice the same target behind two tools."""
    approval: ConfirmationPolicy | None = None
    """For APPROVE: who must approve (permission, number of distinct approvers)."""


class Policy(Protocol):
    """Resource-level authorization and argument-dependent risk.

    `resource` is the validated arguments (or a resource a resolver loaded from them);
    `context` carries the call id, tool risk and anything the host adds.
    """

    async def decide(
        self,
        principal: Principal,
        action: str,
        resource: object,
        context: Mapping[str, object],
    ) -> Decision:
        """Decide one call."""
        ...


class AllowAll:
    """A Policy that adds nothing to the permission check; the default."""

    async def decide(
        self,
        principal: Principal,
        action: str,
        resource: object,
        context: Mapping[str, object],
    ) -> Decision:
        """Allow; the required-permissions check has already run."""
        del principal, action, resource, context
        return Decision(outcome=Outcome.ALLOW, reason="no resource policy", rule="allow-all")


# --- rules -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Facts:
    """What a rule's condition may look at; all of it trusted except `arguments`.

    `arguments` are the validated arguments (the tool's argument model, or a dict for
    raw-schema tools): checked against the schema, but written by the model. Who owns
    what is read from `resource`, which a resolver loaded in the caller's scope.
    """

    principal: Principal
    action: str
    arguments: Any
    resource: Any
    context: Mapping[str, object]


Condition: TypeAlias = Callable[[Facts], bool]
"""A pure predicate over the facts of one call; it must not do I/O or keep state."""


_RESERVED = ("default:", "resolve:")
"""Prefixes of the rule names the engine itself puts on decisions."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """One policy rule: for `tool`, when `when` holds, the outcome is `outcome`.

    `tool` is a full tool name or an `fnmatch` pattern (`payments.*`). A rule without
    `when` always holds for its tools. An APPROVE rule names who approves in
    `approval`; no other outcome may carry one.
    """

    name: str
    tool: str
    outcome: Outcome
    reason: str
    when: Condition | None = None
    approval: ConfirmationPolicy | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.tool or not self.reason:
            raise ConfigurationError("a Rule needs a name, a tool (or pattern) and a reason")
        if self.name.startswith(_RESERVED):
            raise ConfigurationError(
                f"rule {self.name!r}: names starting with {' or '.join(_RESERVED)} are the "
                f"engine's own (defaults and resolvers)",
            )
        if self.outcome is Outcome.NOT_FOUND:
            raise ConfigurationError(
                f"rule {self.name!r}: NOT_FOUND comes from resolvers, not from rules",
            )
        if self.outcome is Outcome.APPROVE:
            if self.approval is None or self.approval.mode is not ConfirmationMode.APPROVE:
                raise ConfigurationError(
                    f"rule {self.name!r}: an APPROVE rule needs "
                    f"approval=ConfirmationPolicy(mode=APPROVE, approver_permission=...)",
                )
        elif self.approval is not None:
            raise ConfigurationError(f"rule {self.name!r}: only APPROVE rules name approvers")

    @property
    def is_pattern(self) -> bool:
        """Whether `tool` is a pattern rather than one tool's name."""
        return any(char in self.tool for char in "*?[")

    def applies_to(self, action: str) -> bool:
        """Whether this rule is about the tool named `action`."""
        return fnmatchcase(action, self.tool) if self.is_pattern else action == self.tool


def _rank(indexed: tuple[int, Rule]) -> tuple[int, int, int]:
    # Strictest outcome first; among APPROVE rules, more distinct approvers first; then
    # the order of declaration. The first rule that holds in this order decides.
    index, rule = indexed
    approvers = rule.approval.distinct_approvers if rule.approval is not None else 0
    return (-_SEVERITY[rule.outcome], -approvers, index)


# --- conditions ------------------------------------------------------------------------------


def holds(*permissions: str) -> Condition:
    """The principal holds every one of `permissions`."""
    required = frozenset(permissions)
    return lambda facts: required <= facts.principal.permissions


def lacks(*permissions: str) -> Condition:
    """The principal lacks at least one of `permissions`."""
    required = frozenset(permissions)
    return lambda facts: not required <= facts.principal.permissions


def is_owner(field: str = "owner_id") -> Condition:
    """The loaded resource's `field` names the principal's user.

    Reads the resource a resolver loaded (a mapping or an object), never the arguments;
    false when nothing was loaded.
    """

    def check(facts: Facts) -> bool:
        resource = facts.resource
        if resource is None:
            return False
        owner = (
            resource.get(field) if isinstance(resource, Mapping) else getattr(resource, field, None)
        )
        return owner is not None and owner == facts.principal.user_id

    return check


def all_of(*conditions: Condition) -> Condition:
    """Every condition holds."""
    return lambda facts: all(condition(facts) for condition in conditions)


def any_of(*conditions: Condition) -> Condition:
    """At least one condition holds."""
    return lambda facts: any(condition(facts) for condition in conditions)


def negate(condition: Condition) -> Condition:
    """The condition does not hold."""
    return lambda facts: not condition(facts)


# --- resolvers -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Resolved:
    """A resource a resolver loaded in the caller's tenant and data scope.

    `key` names the one real target (for example `order:ORD-1001`), or is None when the
    resource is not a single target (a count of rows an export would return).
    """

    key: str | None
    value: Any


ResourceResolver: TypeAlias = Callable[
    [Principal, Any], Awaitable[Resolved | None] | Resolved | None
]
"""`(principal, validated arguments)` → the resource, or None when it does not exist.

Every query a resolver makes must carry the principal's tenant and data scope in its
WHERE clause; a resource of another tenant is then simply not found, never loaded and
filtered afterwards. Sync resolvers run in a worker thread.
"""

_Load: TypeAlias = Callable[[Principal, Any], Awaitable[Resolved | None]]


def _loader(resolver: ResourceResolver) -> _Load:
    if inspect.iscoroutinefunction(resolver):
        return resolver

    async def load(principal: Principal, arguments: object) -> Resolved | None:
        found = await asyncio.to_thread(resolver, principal, arguments)
        if inspect.isawaitable(found):
            found = await found
        return found

    return load


# --- the engine ------------------------------------------------------------------------------

_MAX_CACHED_NAMES = 4096
_DEFAULT_READ = "default:read"
_DEFAULT_WRITE = "default:write"


class PolicyEngine:
    """Rules per tool, resolvers per tool, and one deterministic way to decide.

    For a call of tool `action`:

    1. If a resolver is registered for the tool, it loads the resource in the caller's
       tenant and scope. Nothing found: NOT_FOUND (the gate answers NOT_FOUND, exactly
       as for an id that exists nowhere), and no rule runs.
    2. The tool's rules are tried in precedence order: DENY, then APPROVE (more distinct
       approvers first), then CONFIRM, then ALLOW; within one outcome, in declaration
       order. The first rule whose condition holds decides.
    3. No rule holds: a read-only tool is allowed (its required permissions were already
       checked); anything that writes, or whose side effect the context does not state,
       is denied. Writes need an explicit rule: fail closed.

    Rules are indexed by tool name once, so deciding costs the same however many rules
    other tools have; pattern rules are matched once per tool name and remembered.
    """

    __slots__ = ("_by_tool", "_decisions", "_exact", "_patterns", "_rank", "_resolvers", "_rules")

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        resolvers: Mapping[str, ResourceResolver] | None = None,
    ) -> None:
        declared = tuple(rules)
        seen: set[str] = set()
        for rule in declared:
            if rule.name in seen:
                raise ConfigurationError(f"two policy rules are named {rule.name!r}")
            seen.add(rule.name)
        ranked = [rule for _, rule in sorted(enumerate(declared), key=_rank)]
        self._rules = tuple(ranked)
        self._rank = {rule.name: position for position, rule in enumerate(ranked)}
        self._patterns = tuple(rule for rule in ranked if rule.is_pattern)
        exact: dict[str, list[Rule]] = {}
        for rule in ranked:
            if not rule.is_pattern:
                exact.setdefault(rule.tool, []).append(rule)
        self._exact = {name: tuple(rules) for name, rules in exact.items()}
        # Tool name → its rules, exact and pattern, in precedence order; filled as names
        # are decided (pattern rules are matched once per name), complete from the start
        # when there are no pattern rules.
        self._by_tool: dict[str, tuple[Rule, ...]] = {} if self._patterns else dict(self._exact)
        # Decisions are values: built once per rule, reused whenever no resource is named.
        self._decisions = {rule.name: _decision(rule, None) for rule in ranked}
        self._decisions[_DEFAULT_READ] = _default(read=True, key=None)
        self._decisions[_DEFAULT_WRITE] = _default(read=False, key=None)
        self._resolvers = {name: _loader(found) for name, found in (resolvers or {}).items()}

    @property
    def rules(self) -> tuple[Rule, ...]:
        """Every rule, in precedence order."""
        return self._rules

    def rules_for(self, action: str) -> tuple[Rule, ...]:
        """The rules about one tool, in the order they are tried."""
        found = self._by_tool.get(action)
        if found is None:
            exact = self._exact.get(action, ())
            matched = [rule for rule in self._patterns if rule.applies_to(action)]
            found = (
                tuple(sorted([*exact, *matched], key=lambda rule: self._rank[rule.name]))
                if matched
                else exact
            )
            if len(self._by_tool) < len(self._exact) + _MAX_CACHED_NAMES:
                self._by_tool[action] = found
        return found

    async def decide(
        self,
        principal: Principal,
        action: str,
        resource: object,
        context: Mapping[str, object],
    ) -> Decision:
        """Decide one call; `resource` is the validated arguments (see the class doc)."""
        loaded: object = None
        key: str | None = None
        load = self._resolvers.get(action)
        if load is not None:
            found = await load(principal, resource)
            if found is None:
                return Decision(
                    outcome=Outcome.NOT_FOUND,
                    reason="the resolver found nothing in the caller's tenant and data scope",
                    rule=f"resolve:{action}",
                )
            loaded, key = found.value, found.key
        rules = self.rules_for(action)
        if rules:
            facts = Facts(
                principal=principal,
                action=action,
                arguments=resource,
                resource=loaded,
                context=context,
            )
            for rule in rules:
                if rule.when is None or rule.when(facts):
                    return self._decisions[rule.name] if key is None else _decision(rule, key)
        read = context.get("side_effect") == SideEffect.NONE
        if key is None:
            return self._decisions[_DEFAULT_READ if read else _DEFAULT_WRITE]
        return _default(read=read, key=key)


def _decision(rule: Rule, key: str | None) -> Decision:
    return Decision(
        outcome=rule.outcome,
        reason=rule.reason,
        rule=rule.name,
        resource_key=key,
        approval=rule.approval,
    )


def _default(*, read: bool, key: str | None) -> Decision:
    if read:
        return Decision(
            outcome=Outcome.ALLOW,
            reason="no rule holds; reads are allowed once the tool's permissions are held",
            rule=_DEFAULT_READ,
            resource_key=key,
        )
    return Decision(
        outcome=Outcome.DENY,
        reason="no rule allows this write; writes need an explicit rule",
        rule=_DEFAULT_WRITE,
        resource_key=key,
    )


# --- from decisions to refusals --------------------------------------------------------------


def check_permissions(principal: Principal, spec: ToolSpec) -> None:
    """Refuse with PERMISSION_DENIED unless every permission the tool requires is held.

    The coarse check (stage `permission`): it reads the principal and the spec only,
    never the arguments or any data, so its answer is the same for every argument.
    """
    missing = spec.permissions - principal.permissions
    if missing:
        raise Refusal(
            ErrorCode.PERMISSION_DENIED,
            f"You are not permitted to use {spec.name}. This is final: do not retry it "
            f"or try to reach the same data through another tool.",
            stage="permission",
            detail=f"missing permissions: {', '.join(sorted(missing))}",
        )


def describe(decision: Decision) -> str:
    """The audit detail of a decision: `rule=<name>: <reason>`, then target and approvers."""
    text = f"rule={decision.rule}: {decision.reason}"
    if decision.resource_key is not None:
        text += f"; resource={decision.resource_key}"
    if decision.approval is not None:
        approval = decision.approval
        text += f"; approvers={approval.distinct_approvers} with {approval.approver_permission}"
    return text


def denied(spec: ToolSpec, *, stage: str, detail: str) -> Refusal:
    """The one PERMISSION_DENIED the model reads for a refused target: terminal."""
    return Refusal(
        ErrorCode.PERMISSION_DENIED,
        f"You are not permitted to do this with {spec.name}. This is final: do not "
        f"retry it or try another tool for the same target.",
        stage=stage,
        detail=detail,
    )


def refusal_for(decision: Decision, spec: ToolSpec) -> Refusal | None:
    """The refusal a non-allow decision means for this call, or None to proceed."""
    if decision.outcome is Outcome.ALLOW:
        return None
    detail = describe(decision)
    if decision.outcome is Outcome.DENY:
        return denied(spec, stage="authorization", detail=detail)
    if decision.outcome is Outcome.NOT_FOUND:
        # The same words whether the id belongs to another tenant or to nobody.
        return Refusal(
            ErrorCode.NOT_FOUND,
            "Nothing with that identifier exists here. Check the identifier with the user.",
            stage="authorization",
            detail=detail,
        )
    code = (
        ErrorCode.NEEDS_CONFIRMATION
        if decision.outcome is Outcome.CONFIRM
        else ErrorCode.NEEDS_APPROVAL
    )
    who = "the user's confirmation" if code is ErrorCode.NEEDS_CONFIRMATION else "approval"
    return Refusal(
        code,
        f"This call needs {who} and was not executed. Tell the user what you intend "
        f"to do; do not claim it was done.",
        stage="authorization",
        detail=detail,
    )
