"""An upstream MCP server over stdio whose one tool answers the `_meta` it was sent.

`python tests/mcp/_traced_upstream.py`: the tool `trace` answers, as structured data,
the `traceparent` (and `tracestate`) in its request's `params._meta`, so a test can see
what crossed the process boundary, from the other side of it.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

_TRACE = types.Tool(
    name="trace",
    description="Answer the trace context this request carried.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
)


async def _list(
    _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[_TRACE])


async def _call(
    ctx: ServerRequestContext[Any], _params: types.CallToolRequestParams
) -> types.CallToolResult:
    meta = dict(ctx.meta or {})
    carried = {key: meta.get(key) for key in ("traceparent", "tracestate")}
    return types.CallToolResult(content=[], structured_content=carried)


async def _serve() -> None:
    server: Server[Any] = Server("traced", on_list_tools=_list, on_call_tool=_call)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_serve)
