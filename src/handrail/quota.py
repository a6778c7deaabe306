"""Rate limits and quotas: how often a tool may run, per tool, tenant and principal.

The gate asks a `Limiter` after authorization and before execution, so a denied call
never spends quota. Limiters never authorize and never run tools.
"""

from __future__ import annotations

from typing import Protocol

from handrail.principal import Principal
from handrail.spec import ToolSpec

__all__ = ["Limiter"]


class Limiter(Protocol):
    """Counts calls against limits; says how long to wait when one is reached."""

    async def acquire(self, principal: Principal, spec: ToolSpec) -> float | None:
        """Take one unit for this call: None if allowed, else seconds until a retry may pass."""
        ...
