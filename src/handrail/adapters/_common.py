"""What every definitions exporter shares: refusal, name mapping and schema copies.

Specs that must never be sent are refused, names are mapped without collisions and
schemas are deep-copied so that nothing is shared with the spec. Exporters are handed
`registry.exposed(principal)`; this is the second line of defence for invariant 9, not
the place exposure is decided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from handrail.adapters._names import to_wire_name
from handrail.errors import ConfigurationError
from handrail.spec import ToolSpec

__all__ = ["plain_json", "sendable"]


def plain_json(value: object) -> Any:  # noqa: ANN401 - a JSON value of any shape
    """A deep copy of a JSON value with every mapping a fresh dict and every array a list.

    Spec schemas are read-only mappings whose nested dicts belong to the spec; a
    definition handed to a client library must share none of them.
    """
    if isinstance(value, Mapping):
        return {str(key): plain_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(item) for item in value]
    return value


def sendable(specs: Sequence[ToolSpec]) -> list[tuple[ToolSpec, str]]:
    """Each spec with its wire name, after refusing forbidden, disabled and clashing ones.

    Raises ConfigurationError for an L4 or disabled spec (they are never sent to a
    model), for a name that cannot map, and for two names that map to the same wire
    name or to names differing only in case.
    """
    out: list[tuple[ToolSpec, str]] = []
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.forbidden or not spec.enabled:
            raise ConfigurationError(
                f"tool {spec.name!r} is forbidden or disabled and must never be sent to a "
                f"model; export registry.exposed(principal), not every registered spec",
            )
        wire = to_wire_name(spec.name)
        clash = seen.get(wire.casefold())
        if clash is not None:
            raise ConfigurationError(
                f"tools {clash!r} and {spec.name!r} would share the provider name {wire!r} "
                f"(names are compared without case)",
            )
        seen[wire.casefold()] = spec.name
        out.append((spec, wire))
    return out
