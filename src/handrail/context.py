"""What a running tool may know about its call: principal, call id, deadline.

The runtime injects a ToolContext into any tool parameter annotated with it; the
parameter never appears in the schema the model sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from handrail.clock import Clock
from handrail.principal import Principal

__all__ = ["ToolContext"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """Per-call facts from trusted context, handed to tools and business validators.

    `deadline` is on the clock's monotonic scale. Tools pass `remaining()` to whatever
    they call downstream so no stage gets a fresh full timeout.
    """

    principal: Principal
    call_id: str
    tool: str
    deadline: float
    clock: Clock
    idempotency_key: str | None = None

    def remaining(self) -> float:
        """Seconds left before the deadline, never negative."""
        return max(0.0, self.deadline - self.clock.monotonic())
