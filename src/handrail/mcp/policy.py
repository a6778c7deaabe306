"""The operator's policy for one upstream MCP server: what each imported tool may do.

Owns reading and checking the TOML file (strictly: an unknown key, a wrong type or a
missing `unlisted` setting is a ConfigurationError naming the file and the key) and
turning an upstream tool's name into the risk, side effect, permissions and
confirmation Handrail gives it. Upstream annotations and descriptions never enter
here: risk comes from this file only. It never talks to an upstream.

    unlisted = "confirm"            # required: "confirm" or "hide", no default
    unlisted_permissions = ["ops"]  # optional: what a caller needs for unlisted tools
    approve_new = false             # optional: pin tools seen for the first time unasked

    [tools.read_file]
    risk = "L1"                     # L0..L4 or the RiskLevel name
    permissions = ["files.read"]
    timeout = 10.0                  # optional, seconds

    [tools.read_file.business_values]       # optional: identity-like names that are data
    user_id = "the author whose files are read, checked by resource policy"

    [tools.write_file]
    risk = "L3"
    confirmation = "confirm"        # writes: "confirm" or "approve"
    approver_permission = "files.approve"   # with "approve"
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from handrail.errors import ConfigurationError, RegistrationError
from handrail.spec import (
    BusinessValue,
    ConfirmationMode,
    ConfirmationPolicy,
    RiskLevel,
    SideEffect,
)

__all__ = ["ToolRule", "Unlisted", "UpstreamPolicy", "load_policy", "parse_policy"]


class Unlisted(StrEnum):
    """What becomes of an upstream tool the policy does not name."""

    CONFIRM = "confirm"
    """Imported as a high-risk external write that needs its requester's confirmation."""
    HIDE = "hide"
    """Not imported: never shown, never callable."""


_RISKS: Mapping[str, RiskLevel] = {
    **{level.name: level for level in RiskLevel},
    **{level.name[:2]: level for level in RiskLevel},
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolRule:
    """How Handrail treats one imported tool: all of it from the operator, none from upstream."""

    risk: RiskLevel
    side_effect: SideEffect
    permissions: frozenset[str]
    confirmation: ConfirmationPolicy
    timeout: float | None = None
    business_values: Mapping[str, BusinessValue] = field(default_factory=dict)
    """Parameter names (or JSON Pointers) that look like identity but are data, with why."""

    @property
    def writes(self) -> bool:
        """Whether the tool is a write (and so planned and confirmed before it runs)."""
        return self.side_effect is not SideEffect.NONE


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _ToolEntry(_Strict):
    risk: str
    permissions: list[str] = Field(default_factory=list)
    confirmation: Literal["none", "confirm", "approve"] | None = None
    approver_permission: str | None = None
    distinct_approvers: int = Field(default=1, ge=1, le=10)
    timeout: float | None = Field(default=None, gt=0, le=3600)
    business_values: dict[str, str] = Field(default_factory=dict)


class _PolicyFile(_Strict):
    unlisted: Literal["confirm", "hide"]
    unlisted_permissions: list[str] = Field(default_factory=list)
    approve_new: bool = False
    tools: dict[str, _ToolEntry] = Field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamPolicy:
    """The checked policy of one upstream: its named tools and the unlisted setting.

    `approve_new` pins a tool seen for the first time without asking an operator
    (off by default: a new tool waits for `handrail mcp approve` like a changed one).
    """

    unlisted: Unlisted
    tools: Mapping[str, ToolRule]
    unlisted_permissions: frozenset[str] = frozenset()
    approve_new: bool = False
    source: str = "<policy>"

    def rule(self, tool: str) -> ToolRule | None:
        """The rule for an upstream tool name; None when the tool is hidden."""
        found = self.tools.get(tool)
        if found is not None:
            return found
        if self.unlisted is Unlisted.HIDE:
            return None
        return ToolRule(
            risk=RiskLevel.L3_HIGH_RISK_WRITE,
            side_effect=SideEffect.EXTERNAL_WRITE,
            permissions=self.unlisted_permissions,
            confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        )


def load_policy(path: str | Path) -> UpstreamPolicy:
    """Read and check the policy file at `path`; ConfigurationError names the file."""
    where = str(path)
    try:
        with Path(path).open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigurationError(f"{where}: cannot read the policy ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{where}: not valid TOML ({exc})") from None
    return parse_policy(data, source=where)


def parse_policy(data: Mapping[str, Any], *, source: str = "<policy>") -> UpstreamPolicy:
    """Check a policy already parsed from TOML; every problem names `source` and the key."""
    if "unlisted" not in data:
        raise ConfigurationError(
            f"{source}: the policy must say what becomes of tools it does not name: "
            f'unlisted = "confirm" or unlisted = "hide" (there is no default)',
        )
    try:
        parsed = _PolicyFile.model_validate(dict(data))
    except pydantic.ValidationError as exc:
        raise ConfigurationError(f"{source}: {_first_problem(exc)}") from None
    tools = {name: _rule(source, name, entry) for name, entry in parsed.tools.items()}
    return UpstreamPolicy(
        unlisted=Unlisted(parsed.unlisted),
        tools=tools,
        unlisted_permissions=_permissions(
            source,
            "unlisted_permissions",
            parsed.unlisted_permissions,
        ),
        approve_new=parsed.approve_new,
        source=source,
    )


def _first_problem(exc: pydantic.ValidationError) -> str:
    error = exc.errors(include_url=False, include_input=False)[0]
    key = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"unknown key {key!r}"
    if error["type"] == "missing":
        return f"missing key {key!r}"
    return f"{key}: {error['msg']}"


def _permissions(source: str, key: str, values: list[str]) -> frozenset[str]:
    for value in values:
        if not value.strip() or not value.isprintable():
            raise ConfigurationError(f"{source}: {key}: a permission is a non-empty printable name")
    return frozenset(values)


def _rule(source: str, name: str, entry: _ToolEntry) -> ToolRule:
    key = f"tools.{name}"
    risk = _RISKS.get(entry.risk)
    if risk is None:
        raise ConfigurationError(
            f"{source}: {key}.risk: {entry.risk!r} is not one of "
            f"{', '.join(level.name[:2] for level in RiskLevel)} (or their full names)",
        )
    writes = risk in {RiskLevel.L2_REVERSIBLE_WRITE, RiskLevel.L3_HIGH_RISK_WRITE}
    mode = ConfirmationMode(entry.confirmation or ("confirm" if writes else "none"))
    if writes and mode is ConfirmationMode.NONE:
        # An upstream takes no idempotency key and the proxy has no host command ids:
        # a write it forwards is keyed by a confirmed plan, so a person agrees first.
        raise ConfigurationError(
            f"{source}: {key}.confirmation: a write ({risk.name}) is confirmed or approved",
        )
    if not writes and mode is not ConfirmationMode.NONE:
        raise ConfigurationError(
            f"{source}: {key}.confirmation: a read ({risk.name}) has no confirmation",
        )
    if entry.approver_permission is not None and mode is not ConfirmationMode.APPROVE:
        raise ConfigurationError(
            f'{source}: {key}.approver_permission: only with confirmation = "approve"',
        )
    try:
        confirmation = ConfirmationPolicy(
            mode=mode,
            approver_permission=entry.approver_permission,
            distinct_approvers=entry.distinct_approvers,
        )
    except RegistrationError as exc:
        raise ConfigurationError(f"{source}: {key}: {exc}") from None
    try:
        declared = {
            place: BusinessValue(reason=reason) for place, reason in entry.business_values.items()
        }
    except RegistrationError as exc:
        raise ConfigurationError(f"{source}: {key}.business_values: {exc}") from None
    return ToolRule(
        risk=risk,
        side_effect=SideEffect.EXTERNAL_WRITE if writes else SideEffect.NONE,
        permissions=_permissions(source, f"{key}.permissions", entry.permissions),
        confirmation=confirmation,
        timeout=entry.timeout,
        business_values=declared,
    )
