"""The firewall in front of a real third-party MCP server: @modelcontextprotocol/server-filesystem.

Installed, pinned, by `make npm-tools` under .tools/npm and started by the test over
stdio. Without it the test skips with the reason, except under CI=true, where it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from _mcp_proxying import ALICE, proxied
from handrail.calls import ToolCall
from handrail.envelope import Trust
from handrail.errors import ErrorCode
from handrail.mcp.policy import parse_policy
from handrail.mcp.upstream import StdioUpstream
from handrail.spec import RiskLevel, SideEffect

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / ".tools" / "npm" / "node_modules" / ".bin" / "mcp-server-filesystem"


def _server() -> Path:
    if SERVER.exists():
        return SERVER
    reason = f"{SERVER.relative_to(ROOT)} is missing: run `make npm-tools` (needs Node.js 20+)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must install it")
    pytest.skip(reason)


async def test_a_real_npm_server_behind_the_proxy_reads_through_the_gate_and_writes_wait(
    tmp_path: Path,
) -> None:
    server = _server()
    allowed = tmp_path / "allowed"
    await anyio.Path(allowed).mkdir()
    await anyio.Path(allowed / "a.txt").write_text("hello from the filesystem")
    rules = parse_policy(
        {
            "unlisted": "confirm",
            "tools": {
                "read_text_file": {"risk": "L1", "timeout": 60.0},
                "list_directory": {"risk": "L1", "timeout": 60.0},
            },
        },
    )
    target = StdioUpstream(command=str(server), args=(str(allowed),))
    async with proxied(tmp_path / "state", rules=rules, target=target) as (proxy, app):
        read = await app.handle(
            ToolCall(
                id="r1", name="books.read_text_file", arguments={"path": str(allowed / "a.txt")}
            ),
            ALICE,
        )
        write = await app.handle(
            ToolCall(
                id="w1",
                name="books.write_file",
                arguments={"path": str(allowed / "b.txt"), "content": "x"},
            ),
            ALICE,
        )
        write_spec = app.registry.get("books.write_file").spec
        served = proxy.served

    assert "books.read_text_file" in served
    assert read.status == "ok", read.summary
    assert read.trust is Trust.UNTRUSTED
    assert "hello from the filesystem" in str(read.data)
    # The upstream annotates write_file idempotent and not open-world: no effect on risk.
    assert write_spec.risk is RiskLevel.L3_HIGH_RISK_WRITE
    assert write_spec.side_effect is SideEffect.EXTERNAL_WRITE
    assert write.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert not await anyio.Path(allowed / "b.txt").exists()
