"""The MCP face loads the SDK only when it serves: not on import, not for `--help`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SDK = {"mcp", "mcp_types", "starlette", "uvicorn", "jwt", "sse_starlette"}


def _loaded_after(statement: str) -> set[str]:
    script = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return {name.partition(".")[0] for name in json.loads(done.stdout.splitlines()[-1])}


@pytest.mark.parametrize("path", [["--help"], ["mcp", "--help"], ["mcp", "serve", "--help"]])
def test_the_commands_help_loads_no_part_of_the_sdk(path: list[str]) -> None:
    loaded = _loaded_after(
        "from handrail.cli import app\n"
        "from typer.testing import CliRunner\n"
        f"assert CliRunner().invoke(app, {path!r}).exit_code == 0"
    )
    assert sorted(loaded & SDK) == []


def test_importing_the_package_loads_no_part_of_the_sdk() -> None:
    assert sorted(_loaded_after("import handrail.mcp") & SDK) == []


def test_the_lazy_names_resolve_to_the_servers_objects() -> None:
    import handrail.mcp  # noqa: PLC0415 - the point is when it loads
    from handrail.mcp import server  # noqa: PLC0415

    assert handrail.mcp.GatedServer is server.GatedServer
    assert handrail.mcp.fixed_principal is server.fixed_principal
    assert sorted(handrail.mcp.__all__) == sorted(server.__all__)
    with pytest.raises(AttributeError):
        _ = handrail.mcp.NoSuchName
