"""The continuation tool: the model's only way to read further pages of a result.

It takes the opaque cursor of a paginated envelope and returns the next page from the
stored result (never running the original tool again). The principal must still be
able to use the original tool, and the cursor must be theirs, unaltered and unexpired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from handrail.authz.policy import check_permissions
from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.shaping.pages import MAX_CURSOR, Page
from handrail.spec import RiskLevel, ToolSpec

if TYPE_CHECKING:
    from handrail.declare.registry import Registry
    from handrail.shaping.shaper import Shaper

__all__ = ["continuation_tool"]


def continuation_tool(shaper: Shaper, registry: Registry) -> Tool:
    """The continuation tool for `shaper`'s pages, to register in `registry`."""

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        name=shaper.continuation,
        description=(
            "Read the next page of an earlier tool result. Pass the `cursor` value of "
            "that result exactly as it was given; it works only for you and expires."
        ),
    )
    async def result_page(
        cursor: Annotated[str, Field(min_length=1, max_length=MAX_CURSOR)],
        ctx: ToolContext,
    ) -> Page:
        def lookup(name: str) -> ToolSpec | None:
            found = registry.lookup(name, ctx.principal)
            if found is None:
                return None
            check_permissions(ctx.principal, found.spec)
            return found.spec

        return await shaper.next_page(cursor, ctx.principal, lookup)

    return result_page
