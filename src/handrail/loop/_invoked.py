"""The agent loop's entry points under their `invoke_agent` span, when telemetry is on.

Owns `invoked`, the decorator of `AgentLoop.run`, `resume`, `take_over` and `replay`,
and `loop_telemetry`, which builds the loop's telemetry. Imports no OpenTelemetry: a
loop without telemetry pays one `is None` test per entry point and loads nothing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.loop._telemetry import LoopTelemetry
    from handrail.telemetry import Telemetry

__all__ = ["invoked", "loop_telemetry"]

P = ParamSpec("P")
R = TypeVar("R")


class Instrumented(Protocol):
    """What `invoked` reads of the loop: its telemetry, None for none."""

    _telemetry: LoopTelemetry | None


L = TypeVar("L", bound=Instrumented)
Method = Callable[Concatenate[L, P], Coroutine[Any, Any, R]]


def loop_telemetry(telemetry: Telemetry | None, clock: Clock) -> LoopTelemetry | None:
    """The loop's spans and metrics over `telemetry`; None (nothing loaded) without one."""
    if telemetry is None:
        return None
    from handrail.loop._telemetry import LoopTelemetry  # noqa: PLC0415 - only with telemetry

    return LoopTelemetry(telemetry, clock)


def invoked(operation: str) -> Callable[[Method[L, P, R]], Method[L, P, R]]:
    """Run the decorated entry point under an `invoke_agent` span named for `operation`.

    The span carries the call's `run_id` and `conversation_id` arguments when given,
    and what the run became (`LoopTelemetry.invoke`).
    """

    def decorate(method: Method[L, P, R]) -> Method[L, P, R]:
        signature = inspect.signature(method)

        @functools.wraps(method)
        async def entry(loop: L, /, *args: P.args, **kwargs: P.kwargs) -> R:
            telemetry = loop._telemetry  # noqa: SLF001 - the decorated class's own state
            if telemetry is None:
                return await method(loop, *args, **kwargs)
            named = signature.bind(loop, *args, **kwargs).arguments
            return await telemetry.invoke(
                operation,
                named.get("run_id"),
                named.get("conversation_id"),
                lambda: method(loop, *args, **kwargs),
            )

        return entry

    return decorate
