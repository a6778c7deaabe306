"""What a running tool may know about its call: principal, call id, deadline, secrets.

The runtime injects a ToolContext into any tool parameter annotated with it; the
parameter never appears in the schema the model sees, and its repr never shows a
secret value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from handrail.clock import Clock
from handrail.credentials import SecretAccessError, SecretAccessReason, Secrets
from handrail.principal import Principal

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["ToolContext"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """Per-call facts from trusted context, handed to tools and business validators.

    `deadline` is on the clock's monotonic scale. Tools pass `remaining()` to whatever
    they call downstream so no stage gets a fresh full timeout.

    For writes, `idempotency_key` is the stable key to pass downstream so that system
    can dedupe too; `expected_version` is the target version the plan was confirmed
    against (compare it in the same statement that writes); `transaction` is set for
    LOCAL_WRITE tools: write the effect on it and it commits with the execution record,
    or not at all. `attempt` counts from 1 across retries and reconciliation.

    `secrets` reads the credentials the tool declared, for the principal's tenant;
    use `secret(handle)` and pass the value straight to the client that needs it.
    """

    principal: Principal
    call_id: str
    tool: str
    deadline: float
    clock: Clock
    idempotency_key: str | None = None
    expected_version: str | None = None
    transaction: sa.Connection | None = None
    attempt: int = 1
    secrets: Secrets | None = None

    def remaining(self) -> float:
        """Seconds left before the deadline, never negative."""
        return max(0.0, self.deadline - self.clock.monotonic())

    def secret(self, handle: str) -> str:
        """The value of a declared secret handle; SecretAccessError when it is not available.

        Refused when the call has no secret provider, the tool did not declare the
        handle, or the provider has no value for this tenant.
        """
        if self.secrets is None:
            raise SecretAccessError(
                SecretAccessReason.NOT_CONFIGURED,
                handle=handle,
                tool=self.tool,
            )
        return self.secrets.get(handle)
