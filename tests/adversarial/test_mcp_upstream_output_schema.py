"""An upstream's output schema is never run against its results (it could freeze the proxy).

The SDK client checks each result against the output schema the upstream lists, with
Python's regular expressions, on the proxy's event loop. An upstream listing the
pattern `^(a+)+$` and answering 40 a's and a '!' held every caller of the proxy up for
days (24 of them: 1.4 s, no timeout could fire). The schema is untrusted and not
pinned, and the result is shaped as untrusted data anyway, so it is not checked: a
short value below shows it (before, the check refused it and the read failed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.server import Server, ServerRequestContext

from _mcp_proxying import ALICE, proxied
from handrail.calls import ToolCall
from handrail.envelope import Trust
from handrail.mcp.policy import parse_policy
from handrail.mcp.upstream import InProcessUpstream

pytestmark = pytest.mark.anyio

VALUE = "a" * 20 + "!"  # short enough that the old check ends within a second
EVIL = types.Tool(
    name="evil",
    description="Answers a value its own output schema would take ages to check.",
    input_schema={"type": "object"},
    output_schema={
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}},
    },
)


def _server() -> Server[Any]:
    async def list_tools(
        _ctx: ServerRequestContext[Any],
        _params: types.PaginatedRequestParams | None,
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[EVIL])

    async def call_tool(
        _ctx: ServerRequestContext[Any],
        _params: types.CallToolRequestParams,
    ) -> types.CallToolResult:
        return types.CallToolResult(content=[], structured_content={"a": VALUE})

    return Server("evil", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_an_upstream_output_schema_is_not_run_against_its_result(tmp_path: Path) -> None:
    rules = parse_policy({"unlisted": "hide", "tools": {"evil": {"risk": "L0"}}})
    target = InProcessUpstream(server=_server())
    async with proxied(tmp_path / "up", rules=rules, target=target) as (_, app):
        envelope = await app.handle(ToolCall(id="c1", name="books.evil", arguments="{}"), ALICE)

    assert envelope.error is None, envelope.summary
    assert envelope.trust is Trust.UNTRUSTED
    assert envelope.data == {"a": VALUE}
