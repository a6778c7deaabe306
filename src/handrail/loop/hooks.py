"""Step hooks: where a host observes an agent run as it goes (`AgentLoop(hooks=...)`).

`StepHooks` is the protocol; `NoHooks` does nothing, so a host subclasses it and
overrides only what it needs. Hooks see values after the loop used them (a request
about to be sent, an envelope already in the transcript): they observe, and can change
nothing the gate decided. A hook that raises ends the run (see `HookFailedError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from handrail.errors import HandrailError

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.envelope import Envelope
    from handrail.loop.models import ModelRequest

__all__ = ["HOOK_FAILED", "HookFailedError", "NoHooks", "StepHooks"]

HOOK_FAILED = "HOOK_FAILED"
"""The error a run is stored FAILED with when one of its hooks raised."""


class StepHooks(Protocol):
    """Called by the loop at each step of a live run (`run`, `resume`, `stream`; never `replay`).

    Every method is awaited in line: the run waits for it, and its time counts
    against the run's deadline.
    """

    async def before_model(self, *, run_id: str, step: int, request: ModelRequest) -> None:
        """Before model step `step` (1-based) is asked; `request` is what it will be sent."""
        ...

    async def after_envelope(
        self, *, run_id: str, step: int, call: ToolCall, envelope: Envelope
    ) -> None:
        """After a call's envelope is in the transcript (a resume: the executed plan's)."""
        ...

    async def on_suspend(self, *, run_id: str, plan_ids: tuple[str, ...]) -> None:
        """After the run was stored SUSPENDED; `plan_ids` are every plan it waits for."""
        ...


class NoHooks:
    """Hooks that do nothing: the default, and a base to override one method of."""

    async def before_model(self, *, run_id: str, step: int, request: ModelRequest) -> None:
        """Nothing."""

    async def after_envelope(
        self, *, run_id: str, step: int, call: ToolCall, envelope: Envelope
    ) -> None:
        """Nothing."""

    async def on_suspend(self, *, run_id: str, plan_ids: tuple[str, ...]) -> None:
        """Nothing."""


class HookFailedError(HandrailError):
    """A step hook raised; the hook's exception is the `__cause__`.

    The run is stored FAILED with error HOOK_FAILED, unless it was already stored as
    stopped (an `on_suspend` hook runs after the SUSPENDED run is stored, which stays
    resumable); then this error propagates out of `run`, `resume` or the stream.
    """

    def __init__(self, hook: str) -> None:
        super().__init__(f"the {hook} hook raised")
        self.hook = hook
