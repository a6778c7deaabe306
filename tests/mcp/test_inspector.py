"""The MCP Inspector's CLI (pinned in mcp-tools/, installed by `make npm-tools`) against Handrail.

Over stdio it starts `handrail mcp serve` from an `mcpServers` configuration file, the
shape the README gives clients; over Streamable HTTP it reaches Handrail's HTTP app
(uvicorn on 127.0.0.1) with an API key as its bearer token. Its JSON output is parsed:
the tool list is exactly what the registry exposes to the server's principal, and a
call's result carries the envelope (structured, and as a marked text block). Without the
Inspector the tests skip with the reason, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp

from _mcp_counting import RUNS_ENV, build, tools
from _mcp_http import running
from _npm import npm_program
from handrail import ErrorCode, Handrail, Principal, Registry
from handrail.app import MEMORY
from handrail.mcp import GatedServer
from handrail.mcp.auth import ApiKeyAuthenticator, principal_from_request
from handrail.mcp.http import http_app
from handrail.mcp.keys import ApiKeys
from handrail.shaping.marking import read_block

ROOT = Path(__file__).resolve().parents[2]
HANDRAIL = str(Path(sys.executable).parent / "handrail")
APP = "tests._mcp_counting:build"
SERVE = ("mcp", "serve", "--app", APP, "--store", MEMORY)
WAIT = 120.0
"""Bound on one Inspector run (Node start-up, the server's start-up, one request)."""
ALICE = Principal(user_id="alice", tenant_id="acme")


@pytest.fixture(scope="module")
def inspector() -> Path:
    return npm_program("mcp-inspector-cli")


def _inspect(inspector: Path, config: Path, *method: str, headers: tuple[str, ...] = ()) -> Any:
    """Run the Inspector's CLI once against the one server in `config`; its parsed output."""
    header_args = [arg for header in headers for arg in ("--header", header)]
    done = subprocess.run(  # noqa: S603 - our own pinned program, fixed arguments
        [str(inspector), "--cli", "--config", str(config), *header_args, "--method", *method],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _stdio_config(tmp_path: Path, *options: str) -> tuple[Path, Path]:
    """An `mcpServers` file starting `handrail mcp serve` for alice; and its run record."""
    record = tmp_path / "runs.txt"
    record.touch()
    server = {
        "command": HANDRAIL,
        "args": [*SERVE, "--tenant", "acme", "--user", "alice", *options],
        "env": {RUNS_ENV: str(record), "PATH": os.environ.get("PATH", "")},
    }
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"handrail": server}}), encoding="utf-8")
    return config, record


def _names(listed: dict[str, Any]) -> set[str]:
    return {t["name"] for t in listed["tools"]}


def _exposed(principal: Principal) -> set[str]:
    return {spec.name for spec in build().exposed(principal)}


def _envelope_of(result: dict[str, Any]) -> dict[str, Any]:
    """The structured envelope, checked against the marked text block carrying it."""
    [block] = result["content"]
    read = read_block(block["text"])
    assert read is not None
    structured: dict[str, Any] = result["structuredContent"]
    assert json.loads(read.body) == structured
    return structured


@pytest.mark.parametrize("permissions", [(), ("lab.secret",)], ids=["plain", "lab.secret"])
def test_the_inspector_lists_over_stdio_what_the_registry_exposes(
    inspector: Path, tmp_path: Path, permissions: tuple[str, ...]
) -> None:
    options = [arg for p in permissions for arg in ("--permission", p)]
    config, record = _stdio_config(tmp_path, *options)
    listed = _inspect(inspector, config, "tools/list")
    principal = Principal(user_id="alice", tenant_id="acme", permissions=frozenset(permissions))
    assert _names(listed) == _exposed(principal)
    assert ("lab.secret" in _names(listed)) == bool(permissions)
    order = next(t for t in listed["tools"] if t["name"] == "lab.order")
    assert order["annotations"]["readOnlyHint"] is False
    assert order["annotations"]["destructiveHint"] is True
    assert record.read_text(encoding="utf-8") == ""


def test_the_inspector_calls_over_stdio_and_gets_the_envelope(
    inspector: Path, tmp_path: Path
) -> None:
    config, record = _stdio_config(tmp_path)
    call = ("tools/call", "--tool-name")
    counted = _inspect(inspector, config, *call, "lab.count", "--tool-arg", "note=hi")
    hidden = _inspect(inspector, config, *call, "lab.secret")
    planned = _inspect(inspector, config, *call, "lab.order", "--tool-arg", "title=Dune")
    assert counted["isError"] is False
    assert _envelope_of(counted)["status"] == "ok"
    assert _envelope_of(counted)["data"] == {"counted": "hi"}
    assert hidden["isError"] is True
    assert _envelope_of(hidden)["error_type"] == ErrorCode.UNKNOWN_TOOL.value
    assert _envelope_of(planned)["error_type"] == ErrorCode.NEEDS_CONFIRMATION.value
    assert "plan_id" in _envelope_of(planned)["data"]
    assert record.read_text(encoding="utf-8").splitlines() == ["lab.count"]


def test_the_inspector_lists_and_calls_over_http_with_a_bearer_token(
    inspector: Path, tmp_path: Path
) -> None:
    runs: list[str] = []
    registry = Registry()
    for made in tools(runs.append):
        registry.register(made)
    with Handrail.open(MEMORY, registry=registry) as app:
        keys = ApiKeys(app.store, audit=None)
        token = keys.create(ALICE, label="inspector").key

        def make(resource_url: str) -> ASGIApp:
            served = GatedServer(app, principal=principal_from_request)
            return http_app(served, ApiKeyAuthenticator(keys), resource_url=resource_url)

        with running(make) as served:
            config = tmp_path / "mcp.json"
            entry = {"type": "streamable-http", "url": served.resource_url}
            config.write_text(json.dumps({"mcpServers": {"handrail": entry}}), encoding="utf-8")
            bearer = (f"Authorization: Bearer {token}",)
            listed = _inspect(inspector, config, "tools/list", headers=bearer)
            counted = _inspect(
                inspector,
                config,
                *("tools/call", "--tool-name", "lab.count", "--tool-arg", "note=hi"),
                headers=bearer,
            )
            refused = subprocess.run(  # noqa: S603 - no token: the server must refuse
                [str(inspector), "--cli", "--config", str(config), "--method", "tools/list"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=WAIT,
                check=False,
            )
    assert _names(listed) == {spec.name for spec in registry.exposed(ALICE)}
    assert _envelope_of(counted)["data"] == {"counted": "hi"}
    assert refused.returncode != 0
    assert runs == ["lab.count"]
