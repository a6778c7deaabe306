"""The authenticated caller: who, for which tenant, with which permissions and data scope.

A Principal is built by the host application from its own authentication. Handrail
never reads identity, tenant or authority from model arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from handrail.text import is_storable

__all__ = ["Principal"]


def _frozen_mapping(value: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """Identity from authentication, immutable for the life of a request.

    `data_scope` narrows what the principal may see inside its tenant (for example
    `{"region": "eu"}`); tools and resolvers apply it to every query.
    """

    user_id: str
    tenant_id: str
    permissions: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    data_scope: Mapping[str, object] = field(default_factory=dict)
    request_id: str | None = None
    trace_id: str | None = None

    def __post_init__(self) -> None:
        if not self.user_id or not self.tenant_id:
            msg = "a Principal needs a non-empty user_id and tenant_id"
            raise ValueError(msg)
        if not (is_storable(self.user_id) and is_storable(self.tenant_id)):
            # Both key every stored record; PostgreSQL text holds no NUL, no database a
            # lone surrogate, and an escaped copy could name another user or tenant.
            msg = "a Principal's user_id and tenant_id must not hold NUL or a lone surrogate"
            raise ValueError(msg)
        object.__setattr__(self, "permissions", frozenset(self.permissions))
        object.__setattr__(self, "roles", frozenset(self.roles))
        object.__setattr__(self, "data_scope", _frozen_mapping(self.data_scope))

    def snapshot(self) -> str:
        """JSON of identity and authority, kept with an execution record.

        A reconciler in another process retries the write for the same principal.
        """
        return json.dumps(
            {
                "user_id": self.user_id,
                "tenant_id": self.tenant_id,
                "roles": sorted(self.roles),
                "permissions": sorted(self.permissions),
                "data_scope": dict(self.data_scope),
                "request_id": self.request_id,
                "trace_id": self.trace_id,
            },
            sort_keys=True,
            default=str,
        )

    @classmethod
    def from_snapshot(cls, snapshot: str) -> Principal:
        """The principal `snapshot()` wrote."""
        data = json.loads(snapshot)
        return cls(
            user_id=data["user_id"],
            tenant_id=data["tenant_id"],
            roles=frozenset(data["roles"]),
            permissions=frozenset(data["permissions"]),
            data_scope=data["data_scope"],
            request_id=data.get("request_id"),
            trace_id=data.get("trace_id"),
        )

    def has_permissions(self, required: frozenset[str]) -> bool:
        """True when every required permission is held."""
        return required <= self.permissions

    def attribute(self, name: str) -> object:
        """Read a trusted attribute by name, for trusted-parameter injection.

        Names are `user_id`, `tenant_id`, `roles`, `permissions`, `request_id`,
        `trace_id`, or `data_scope.<key>`.
        """
        if name.startswith("data_scope."):
            return self.data_scope[name.removeprefix("data_scope.")]
        if name in _ATTRIBUTES:
            value = getattr(self, name)
            return sorted(value) if isinstance(value, frozenset) else value
        msg = f"Principal has no trusted attribute {name!r}"
        raise KeyError(msg)


_ATTRIBUTES = frozenset(
    {"user_id", "tenant_id", "permissions", "roles", "request_id", "trace_id"},
)
