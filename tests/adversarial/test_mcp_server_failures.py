"""Failures inside the MCP server's own parts reach the client without their text.

The SDK answers a handshake-era request whose handler raised with the exception's
message; a host's principal source or command-id hook that fails with a database
address in its message must not hand that to a client. A failing principal source
refuses the request (nothing listed, PERMISSION_DENIED, nothing runs); any other
failure is a generic internal error. Either way the server keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from _mcp_counting import tools
from handrail import Handrail, Principal, Registry
from handrail.app import MEMORY
from handrail.errors import ErrorCode
from handrail.mcp import GatedServer
from mcp import Client

pytestmark = pytest.mark.anyio

WAIT = 30.0
SECRET = "postgresql://admin:hunter2@db.internal/prod"  # noqa: S105 - bait, no secret
ALICE = Principal(user_id="alice", tenant_id="t1")
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])


@pytest.fixture
def runs() -> list[str]:
    return []


@pytest.fixture
def app(runs: list[str]) -> Iterator[Handrail]:
    registry = Registry()
    for made in tools(runs.append):
        registry.register(made)
    with Handrail.open(MEMORY, registry=registry) as opened:
        yield opened


def _failing() -> Principal:
    raise RuntimeError(f"cannot reach {SECRET}")


def _everything(result: Any) -> str:
    return result.model_dump_json() if hasattr(result, "model_dump_json") else str(result)


@MODES
async def test_a_failing_principal_source_refuses_without_its_text_and_runs_nothing(
    app: Handrail, runs: list[str], mode: str
) -> None:
    server = GatedServer(app, principal=_failing)
    with anyio.fail_after(WAIT):
        async with Client(server.lowlevel, mode=mode) as client:
            listed = await client.list_tools()
            result = await client.call_tool("lab.count", {"note": "x"})
    server.close()

    assert listed.tools == []
    assert result.is_error
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["error_type"] == ErrorCode.PERMISSION_DENIED.value
    assert SECRET not in _everything(result)
    assert runs == []


@MODES
async def test_a_failing_host_hook_is_a_generic_error_and_the_server_keeps_serving(
    app: Handrail, runs: list[str], mode: str
) -> None:
    def command_id(ctx: object) -> str | None:
        del ctx
        raise RuntimeError(f"session lookup failed at {SECRET}")

    server = GatedServer(app, principal=lambda: ALICE, command_id=command_id)
    with anyio.fail_after(WAIT):
        async with Client(server.lowlevel, mode=mode) as client:
            with pytest.raises(MCPError) as failed:
                await client.call_tool("lab.count", {"note": "x"})
            listed = await client.list_tools()
    server.close()

    assert failed.value.error.code == types.INTERNAL_ERROR
    assert SECRET not in str(failed.value.error)
    assert "lab.count" in {t.name for t in listed.tools}
    assert runs == []
