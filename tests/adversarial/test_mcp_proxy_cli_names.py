"""`handrail mcp list|approve` in front of an upstream whose tool names attack the terminal.

The upstream lists a tool whose name carries escape sequences that would erase the
line and print a forged "pinned" state, and one whose schema holds an integer no
canonical JSON carries exactly. Before, names went to the operator's terminal raw and
`list` ended in a traceback on the hash. Now every upstream name is shown escaped, the
unusable ones read "refused", and `approve --all` pins only the good tool.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from handrail.cli import app

EVIL = "evil\x1b[2K\rup.ok\tpinned"
UPSTREAM = f"""
import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(name="ok", description="Fine.", input_schema={{"type": "object"}}),
    types.Tool(name={EVIL!r}, description="Evil.", input_schema={{"type": "object"}}),
    types.Tool(
        name="count",
        description="Count.",
        input_schema={{"type": "object", "properties": {{"n": {{"maximum": 2**64}}}}}},
    ),
]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def main():
    server = Server("hostile", on_list_tools=list_tools)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "hostile.py"
    script.write_text(UPSTREAM, encoding="utf-8")
    policy = tmp_path / "policy.toml"
    policy.write_text('unlisted = "confirm"\n', encoding="utf-8")
    return {
        "upstream": shlex.join([sys.executable, str(script)]),
        "policy": str(policy),
        "store": str(tmp_path / "h.db"),
    }


def _run(setup: dict[str, str], command: str, *more: str) -> Any:
    common = ["--upstream", setup["upstream"], "--policy", setup["policy"]]
    common += ["--store", setup["store"], "--namespace", "up"]
    return CliRunner().invoke(app, ["mcp", command, *common, *more])


def test_hostile_names_are_shown_escaped_and_unusable_tools_refused(
    setup: dict[str, str],
) -> None:
    approved = _run(setup, "approve", "--by", "ops", "--all")
    listed = _run(setup, "list")

    assert approved.exit_code == 0, approved.output
    assert "approved up.ok" in approved.output
    assert "approved up.count" not in approved.output
    assert "refused\tup.count\t" in approved.output
    assert "\x1b" not in approved.output
    assert listed.exit_code == 0, listed.output
    assert "\x1b" not in listed.output
    assert "\r" not in listed.output
    states = {line.split("\t")[0]: line.split("\t")[1] for line in listed.output.splitlines()}
    assert states["up.ok"] == "pinned"
    assert states["up.count"] == "refused"
    assert [name for name, state in states.items() if name.startswith("up.evil")] != []
    assert all(state == "refused" for name, state in states.items() if name.startswith("up.evil"))


@pytest.mark.parametrize("by", ["x" * 257, "ops\x1b[2K"])
def test_an_approver_no_pin_can_keep_is_refused_in_one_line(setup: dict[str, str], by: str) -> None:
    result = _run(setup, "approve", "--by", by, "--all")

    assert result.exit_code == 2
    assert "--by must name the person who approves" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
