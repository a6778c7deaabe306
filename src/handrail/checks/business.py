"""Stage 3, business rules: the tool's own validators (existence, state, cross-field).

A validator's signal becomes a refusal with its own code (NOT_FOUND, CONFLICT,
NEEDS_CLARIFICATION), in the tool's words: untrusted, never Handrail's. Runs only after
the coarse permission check, so a caller who may not use the tool learns nothing about
the data. Never authorizes or executes anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from handrail.errors import Refusal, ToolSignal

if TYPE_CHECKING:
    from handrail.context import ToolContext
    from handrail.declare.definition import BoundArguments, Tool


__all__ = ["check_business_rules"]


async def check_business_rules(tool: Tool, bound: BoundArguments, ctx: ToolContext) -> None:
    """Stage 3: the tool's own validators (existence, state, cross-field rules)."""
    try:
        await tool.check(bound, ctx)
    except ToolSignal as signal:
        raise Refusal(
            signal.code,
            signal.message,
            stage="business",
            retryable=signal.retryable,
            candidates=getattr(signal, "candidates", ()),
            from_tool=True,
        ) from None
