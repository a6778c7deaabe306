"""Plan: the immutable statement of one intended write, and the hash that binds it.

A plan holds everything a confirmation agrees to: tool, schema version, canonical
arguments, the expected version of the target, who asks for which tenant, the risk,
who must agree, the impact summary people read, and when the offer ends. `plan_hash`
is SHA-256 over the RFC 8785 (JCS) form of all of it, so a change of any part is a
different plan. Plans never change; their state lives beside them (`PlanRecord`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from handrail.canonical import canonical_json, sha256_hex
from handrail.errors import IllegalTransitionError
from handrail.spec import ConfirmationMode, RiskLevel

__all__ = [
    "Amount",
    "Impact",
    "Plan",
    "PlanRecord",
    "PlanState",
    "check_plan_transition",
]

_CURRENCY_EXPONENTS = {"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "BHD": 3, "KWD": 3}
_MAX_EXPONENT = 8


@dataclass(frozen=True, slots=True)
class Amount:
    """Money as an integer count of minor units (cents) with its ISO 4217 currency.

    Never a float: `Amount.of(Decimal("12.34"), "EUR")` is 1234 minor units, and an
    amount with more decimals than the currency has is refused rather than rounded.
    """

    minor_units: int
    currency: str
    exponent: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.minor_units, bool) or not isinstance(self.minor_units, int):
            msg = "Amount.minor_units must be an int (minor units), never a float"
            raise TypeError(msg)
        if len(self.currency) != 3 or not self.currency.isalpha() or not self.currency.isupper():  # noqa: PLR2004
            msg = f"currency must be an ISO 4217 code such as 'EUR', not {self.currency!r}"
            raise ValueError(msg)
        if not 0 <= self.exponent <= _MAX_EXPONENT:
            msg = "exponent must be between 0 and 8"
            raise ValueError(msg)

    @classmethod
    def of(cls, value: Decimal | int | str, currency: str) -> Amount:
        """Convert a major-unit Decimal (or int, or decimal string) exactly."""
        if isinstance(value, float):
            msg = "amounts are Decimal, int or str, never float"
            raise TypeError(msg)
        exponent = _CURRENCY_EXPONENTS.get(currency, 2)
        minor = Decimal(value).scaleb(exponent)
        if minor != minor.to_integral_value():
            msg = f"{value} has more decimals than {currency} allows ({exponent})"
            raise ValueError(msg)
        return cls(int(minor), currency, exponent)

    def __str__(self) -> str:
        major = Decimal(self.minor_units).scaleb(-self.exponent)
        return f"{major:.{self.exponent}f} {self.currency}"

    def to_json(self) -> dict[str, Any]:
        """Minor units, currency, exponent and the rendered text."""
        return {
            "minor_units": self.minor_units,
            "currency": self.currency,
            "exponent": self.exponent,
            "text": str(self),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Impact:
    """What a write will do, written by its tool for the people who confirm it.

    `target` names the object, `action` the change; `amounts` are money, `counts` how
    many things change (rows, recipients); `reversible` says whether it can be undone.
    """

    action: str
    target: str
    reversible: bool
    amounts: tuple[Amount, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "amounts", tuple(self.amounts))
        object.__setattr__(self, "notes", tuple(self.notes))
        counts = dict(self.counts)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in counts.values()):
            msg = "Impact.counts are integers"
            raise TypeError(msg)
        object.__setattr__(self, "counts", MappingProxyType(counts))

    def to_json(self) -> dict[str, Any]:
        """The impact as plain JSON, as hashed into the plan and shown to people."""
        return {
            "action": self.action,
            "target": self.target,
            "reversible": self.reversible,
            "amounts": [a.to_json() for a in self.amounts],
            "counts": dict(self.counts),
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Impact:
        """Inverse of `to_json`."""
        return cls(
            action=data["action"],
            target=data["target"],
            reversible=data["reversible"],
            amounts=tuple(
                Amount(a["minor_units"], a["currency"], a["exponent"]) for a in data["amounts"]
            ),
            counts=data["counts"],
            notes=tuple(data["notes"]),
        )

    def describe(self) -> str:
        """One line for a person: action, target, money, counts and reversibility."""
        parts = [f"{self.action} {self.target}"]
        parts.extend(str(a) for a in self.amounts)
        parts.extend(f"{what}: {n}" for what, n in sorted(self.counts.items()))
        parts.append("reversible" if self.reversible else "NOT reversible")
        return "; ".join(parts)


class PlanState(StrEnum):
    """Where a plan is: proposed, waiting, decided, or executed."""

    PROPOSED = "PROPOSED"
    AWAITING_CONFIRMATION = "AWAITING_CONFIRMATION"
    CONFIRMED = "CONFIRMED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    EXECUTED = "EXECUTED"


_PLAN_MOVES: Mapping[PlanState, frozenset[PlanState]] = MappingProxyType(
    {
        PlanState.PROPOSED: frozenset(
            {PlanState.AWAITING_CONFIRMATION, PlanState.REJECTED, PlanState.EXPIRED},
        ),
        PlanState.AWAITING_CONFIRMATION: frozenset(
            {PlanState.CONFIRMED, PlanState.REJECTED, PlanState.EXPIRED},
        ),
        PlanState.CONFIRMED: frozenset(
            {PlanState.EXECUTED, PlanState.REJECTED, PlanState.EXPIRED},
        ),
        PlanState.REJECTED: frozenset(),
        PlanState.EXPIRED: frozenset(),
        PlanState.EXECUTED: frozenset(),
    },
)


def check_plan_transition(current: PlanState, new: PlanState) -> None:
    """Raise IllegalTransitionError unless `current → new` is a move of the plan machine."""
    if new not in _PLAN_MOVES[current]:
        msg = f"a plan cannot move from {current} to {new}"
        raise IllegalTransitionError(msg)


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """One intended write, immutable; `plan_hash` covers every other field.

    Build with `Plan.create`, which computes the hash. `arguments` is the canonical
    JSON text of the validated arguments (model-facing ones only; trusted parameters
    are filled from the principal at execution). Times are UTC.
    """

    plan_id: str
    tool: str
    schema_version: str
    arguments: str
    expected_version: str | None
    user_id: str
    tenant_id: str
    risk: RiskLevel
    confirmation: ConfirmationMode
    required_approvals: int
    impact: Impact
    created_at: datetime
    expires_at: datetime
    revises: str | None
    plan_hash: str
    approver_permission: str | None = None
    """For APPROVE plans: the permission an approver must hold."""

    @classmethod
    def create(
        cls,
        *,
        plan_id: str,
        tool: str,
        schema_version: str,
        arguments: Mapping[str, Any],
        expected_version: str | None,
        user_id: str,
        tenant_id: str,
        risk: RiskLevel,
        confirmation: ConfirmationMode,
        required_approvals: int,
        impact: Impact,
        created_at: datetime,
        expires_at: datetime,
        revises: str | None = None,
        approver_permission: str | None = None,
    ) -> Plan:
        """A plan with its hash; raises ValueError for arguments JSON cannot hold exactly."""
        if created_at.tzinfo is None or expires_at.tzinfo is None:
            msg = "plan times must be timezone-aware"
            raise ValueError(msg)
        if confirmation is ConfirmationMode.NONE:
            msg = "a plan exists to be confirmed; its confirmation mode cannot be NONE"
            raise ValueError(msg)
        text = canonical_json(dict(arguments))
        # JCS writes a whole float below 1e21 without an exponent, so one of 2**53 or more
        # would read back as an integer no canonical form holds: the plan could never run.
        try:
            canonical_json(json.loads(text))
        except ValueError as exc:
            msg = "the arguments do not read back as the same JSON (a float of 2**53 or more)"
            raise ValueError(msg) from exc
        fields_: dict[str, Any] = {
            "plan_id": plan_id,
            "tool": tool,
            "schema_version": schema_version,
            "arguments": text.decode(),
            "expected_version": expected_version,
            "user_id": user_id,
            "tenant_id": tenant_id,
            "risk": risk,
            "confirmation": confirmation,
            "required_approvals": required_approvals,
            "impact": impact,
            "created_at": created_at,
            "expires_at": expires_at,
            "revises": revises,
            "approver_permission": approver_permission,
        }
        return cls(**fields_, plan_hash=_hash(fields_))

    @property
    def argument_values(self) -> dict[str, Any]:
        """The arguments as a fresh dict."""
        loaded: dict[str, Any] = json.loads(self.arguments)
        return loaded

    def verify_hash(self) -> bool:
        """Whether `plan_hash` still matches the content (detects a tampered row)."""
        fields_ = {name: getattr(self, name) for name in _HASHED}
        return _hash(fields_) == self.plan_hash


_HASHED = (
    "plan_id",
    "tool",
    "schema_version",
    "arguments",
    "expected_version",
    "user_id",
    "tenant_id",
    "risk",
    "confirmation",
    "required_approvals",
    "impact",
    "created_at",
    "expires_at",
    "revises",
    "approver_permission",
)


def _hash(fields_: Mapping[str, Any]) -> str:
    document = {
        "v": 1,
        **{name: fields_[name] for name in _HASHED},
        "risk": int(fields_["risk"]),
        "confirmation": str(fields_["confirmation"]),
        "impact": fields_["impact"].to_json(),
        "created_at": fields_["created_at"].astimezone(UTC).isoformat(),
        "expires_at": fields_["expires_at"].astimezone(UTC).isoformat(),
    }
    return sha256_hex(canonical_json(document))


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanRecord:
    """A stored plan with its current state and the approvals it has collected.

    `version` increases with every state change; moves are compare-and-set on it.
    """

    plan: Plan
    state: PlanState
    version: int
    approvals: frozenset[str] = frozenset()
    updated_at: datetime
