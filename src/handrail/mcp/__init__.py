"""MCP: a Handrail application's tools served over the Model Context Protocol.

`GatedServer` serves `registry.exposed(principal)` through the gate, on the official
`mcp` SDK (the `mcp` extra). The names load on first use (PEP 562), so importing this
package imports no part of the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from handrail.mcp.server import GatedServer, PrincipalSource, fixed_principal

_LAZY = {
    "GatedServer": "handrail.mcp.server",
    "PrincipalSource": "handrail.mcp.server",
    "fixed_principal": "handrail.mcp.server",
}
"""Names imported from their module when first asked for: they load the SDK."""


def __getattr__(name: str) -> object:
    """Import a name the first time it is asked for."""
    if (module := _LAZY.get(name)) is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = ["GatedServer", "PrincipalSource", "fixed_principal"]
