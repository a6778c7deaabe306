"""`handrail mcp serve` as a subprocess, driven by the official SDK's stdio client.

The server acts for the principal its options name; the client only proposes calls.
Every wait is bounded (the SDK client's read timeout, the subprocess timeout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.stdio import stdio_client

from handrail import Keyring
from handrail.shaping.marking import read_block
from handrail.store import open_store
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
HANDRAIL = str(Path(sys.executable).parent / "handrail")
APP = "tests.mcp._mcp_app:build"
WAIT = 60.0


def _params(*options: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=HANDRAIL,
        args=["mcp", "serve", "--app", APP, "--tenant", "t1", "--user", "alice", *options],
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", ""), **(env or {})},
    )


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[Any]:
    with (tmp_path / "server.err").open("w+", encoding="utf-8") as log:
        yield log


def _client(params: StdioServerParameters, errlog: Any, mode: str) -> Client:
    return Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=WAIT)


def _structured(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_stdio_client_lists_and_calls_the_exposed_tools_through_the_gate(
    errlog: Any,
    mode: str,
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_params("--store", "memory://"), errlog, mode) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("lib.search", {"query": "dune"})
            hidden = await client.call_tool("lib.secret_report", {})
            forged = await client.call_tool("lib.whoami", {"tenant": "t2"})
            honest = await client.call_tool("lib.whoami", {})
    assert "lib.secret_report" not in listed
    assert {"lib.search", "lib.whoami", "lib.order_book"} <= listed
    assert _structured(found)["data"] == ["Dune"]
    [block] = found.content
    assert isinstance(block, types.TextContent)
    read = read_block(block.text)
    assert read is not None
    assert json.loads(read.body) == _structured(found)
    assert _structured(hidden)["error_type"] == "UNKNOWN_TOOL"
    assert _structured(forged)["error_type"] == "INVALID_ARGUMENTS"
    assert _structured(honest)["data"] == "t1"


async def test_permissions_come_from_the_servers_options(errlog: Any) -> None:
    params = _params("--store", "memory://", "--permission", "reports.read")
    with anyio.fail_after(WAIT):
        async with _client(params, errlog, "legacy") as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            report = await client.call_tool("lib.secret_report", {})
    assert "lib.secret_report" in listed
    assert _structured(report)["data"] == {"sold": 42}


async def test_a_write_over_stdio_is_a_stored_plan_and_no_token_reaches_the_client(
    tmp_path: Path,
    errlog: Any,
) -> None:
    db = tmp_path / "handrail.db"
    params = _params("--store", str(db), "--keyring", str(_keys(tmp_path)))
    with anyio.fail_after(WAIT):
        async with _client(params, errlog, "legacy") as client:
            result = await client.call_tool("lib.order_book", {"title": "Emma"})
    structured = _structured(result)
    assert result.is_error is True
    assert structured["error_type"] == "NEEDS_CONFIRMATION"
    assert "token" not in result.model_dump_json(by_alias=True).lower()
    store = open_store(db)
    try:
        [plan] = store.list_plans(tenant_id="t1")
        assert plan.plan.plan_id == structured["data"]["plan_id"]
        assert plan.plan.tool == "lib.order_book"
        # The server closed its application on hang-up: the call's audit trail is stored.
        trail = store.read_audit(tenant_id="t1", limit=100)
        assert any(e.tool == "lib.order_book" and e.stage == "write" for e in trail)
    finally:
        store.close()


async def test_a_cancelled_call_over_stdio_stops_and_the_server_keeps_serving(
    tmp_path: Path,
    errlog: Any,
) -> None:
    started = anyio.Event()
    db = tmp_path / "handrail.db"

    async def progress(value: float, total: float | None, message: str | None) -> None:
        started.set()

    with anyio.fail_after(WAIT):
        params = _params("--store", str(db), "--keyring", str(_keys(tmp_path)))
        async with _client(params, errlog, "legacy") as client:
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    await client.call_tool(
                        "lib.slow_count", {"steps": 1}, progress_callback=progress
                    )

                group.start_soon(call)
                await started.wait()  # the tool runs and has reported its progress
                group.cancel_scope.cancel()
            after = await client.call_tool("lib.search", {"query": "emma"})
    assert _structured(after)["data"] == ["Emma"]
    store = open_store(db)
    try:
        trail = store.read_audit(tenant_id="t1", limit=100)
    finally:
        store.close()
    # The gate saw the cancellation: the tool stopped, and nothing answered for it.
    assert any(
        e.tool == "lib.slow_count" and (e.stage, e.decision) == ("execute", "cancelled")
        for e in trail
    )


def _keys(tmp_path: Path) -> Path:
    keys = tmp_path / "keys"
    keys.write_text(Keyring.new_key_text("k1") + "\n", encoding="utf-8")
    keys.chmod(0o600)
    return keys


def _run(*options: str, user: str = "alice") -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own command with fixed arguments
        [HANDRAIL, "mcp", "serve", "--app", APP, "--tenant", "t1", "--user", user, *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        stdin=subprocess.DEVNULL,
        env={"PATH": os.environ.get("PATH", "")},
    )


def test_write_tools_over_a_shared_store_without_keys_are_refused_at_start(tmp_path: Path) -> None:
    done = _run("--store", str(tmp_path / "handrail.db"))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert "keyring" in done.stderr


def test_a_confirmation_page_template_must_name_the_plan() -> None:
    done = _run("--store", "memory://", "--confirm-url", "https://shop.example/plans")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "{plan_id}" in done.stderr


def test_an_empty_user_is_refused() -> None:
    done = _run("--store", "memory://", user="")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "--user" in done.stderr
