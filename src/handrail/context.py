"""What a running tool may know about its call: principal, call id, deadline, secrets.

The runtime injects a ToolContext into any tool parameter annotated with it; the
parameter never appears in the schema the model sees, and its repr never shows a
secret value. It also carries what decided the model's toolset (`ExposureView`), for
the catalogue tools that must stay within it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

from handrail.clock import Clock
from handrail.credentials import SecretAccessError, SecretAccessReason, Secrets
from handrail.principal import Principal
from handrail.spec import RiskLevel

if TYPE_CHECKING:
    import sqlalchemy as sa

    from handrail.tasking import TaskScope

__all__ = ["ExposureView", "ProgressReporter", "ToolContext", "reporting_progress"]

ProgressReporter: TypeAlias = Callable[[float, "float | None", "str | None"], Awaitable[None]]
"""`(progress, total, message)`: where a running call's progress goes, if anywhere."""

_PROGRESS: ContextVar[ProgressReporter | None] = ContextVar("handrail_progress", default=None)


@contextmanager
def reporting_progress(reporter: ProgressReporter) -> Iterator[None]:
    """Send the progress of calls handled inside this block to `reporter`.

    The host side of `ToolContext.report_progress`: a face (the MCP server) wraps
    `gate.handle` in it when its client asked for progress. A context variable, so
    it follows the call into the tasks and threads the gate runs it in.
    """
    token = _PROGRESS.set(reporter)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


class ExposureView(Protocol):
    """What a tool may read of the request that decided the model's toolset.

    The gate hands a tool the `ExposureRequest` it was given (`Exposure.request`); this
    is its shape as the vocabulary sees it, since a ToolContext may not depend on the
    declare stage. Host facts only, never the model's.
    """

    @property
    def scenario(self) -> str | None:
        """The request's scenario; None: unscoped."""
        ...

    @property
    def risk_ceiling(self) -> RiskLevel:
        """The riskiest level the request may see."""
        ...

    @property
    def preferred(self) -> tuple[str, ...]:
        """Tools the host hinted at, most wanted first."""
        ...

    @property
    def discovered(self) -> frozenset[str]:
        """Deferred tools a search found in this run, shown when they pass every filter."""
        ...

    @property
    def include_deferred(self) -> bool:
        """Whether every deferred tool is shown."""
        ...

    @property
    def narrowed_to(self) -> frozenset[str] | None:
        """The only names that may be shown (the active skills' tools), if narrowed."""
        ...


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

    `exposure` is the request that decided what this call's model was shown (an
    `ExposureRequest`), when the gate was given one; None when the host gave no
    exposure (every tool the principal may reach is callable) and for confirmed writes,
    which run outside the model's request.
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
    exposure: ExposureView | None = None
    task: TaskScope | None = None
    """Set while the call runs as a task (`runs_as=TaskMode(...)`): its steps, effects
    and progress. None for every inline call."""

    async def report_progress(
        self,
        progress: float,
        total: float | None = None,
        message: str | None = None,
    ) -> None:
        """Tell whoever waits on this call how far it has got; nothing when nobody asked.

        Advisory: `progress` should grow from call to call, `total` is the end when
        known, `message` a short line for people (shown as the tool wrote it).
        """
        reporter = _PROGRESS.get()
        if reporter is not None:
            await reporter(progress, total, message)

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
