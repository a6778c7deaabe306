"""The bookstore served over MCP, end to end, as separate processes.

The example client (`python -m examples.mcp_bookstore.client`) starts `handrail mcp
serve` over stdio with the official SDK, for each sample tenant: it is offered the
three readable tools (never the forbidden one), finds its own tenant's book and stock,
and is refused another tenant in its arguments and another tenant's order. Every call
is in the store's audit trail under the server's tenant. The sample `mcp.json`, with its
placeholders filled in, starts the same server for the MCP Inspector's CLI (skipped
without the npm tools, except under CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests._npm import npm_program

from examples.mcp_bookstore.client import OTHER_TENANTS_ORDER
from handrail import ErrorCode, Keyring
from handrail.store import open_store

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "mcp_bookstore" / "mcp.json"
PLACEHOLDER = "/ABSOLUTE/PATH/TO/handrail"
SUBPROCESS_BOUND = 120.0
"""How long one process may take before the test gives up on it, in seconds."""
DARWIN = {"acme": "Origin of Species", "globex": "Voyage of the Beagle"}
READABLE = ["bookstore.check_inventory", "bookstore.order_status", "bookstore.search_books"]


def _walk(work: Path, tenant: str, user: str) -> dict[str, Any]:
    argv = ["--json", "--dir", str(work), "--tenant", tenant, "--user", user]
    done = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "examples.mcp_bookstore.client", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    walk: dict[str, Any] = json.loads(done.stdout)
    return walk


@pytest.mark.parametrize(("tenant", "user"), [("acme", "alice"), ("globex", "gina")])
def test_the_client_walks_its_own_tenants_bookstore_over_mcp(
    tmp_path: Path, tenant: str, user: str
) -> None:
    walk = _walk(tmp_path, tenant, user)
    search, stock, forged, theirs = walk["steps"]
    assert walk["tools"] == READABLE
    assert search["status"] == "ok"
    assert [book["title"] for book in search["data"]] == [DARWIN[tenant]]
    assert stock["status"] == "ok"
    assert stock["data"]["isbn"] == search["data"][0]["isbn"]
    assert forged["error_type"] == ErrorCode.INVALID_ARGUMENTS.value
    assert theirs["arguments"] == {"order_id": OTHER_TENANTS_ORDER[tenant]}
    assert theirs["error_type"] == ErrorCode.NOT_FOUND.value

    store = open_store(tmp_path / "mcp-bookstore.db")
    try:
        events = store.read_audit(limit=500)
    finally:
        store.close()
    called = {event.tool for event in events if event.tool_call_id is not None}
    assert {"bookstore.search_books", "bookstore.check_inventory"} <= called
    assert "bookstore.delete_all_orders" not in called


def test_the_sample_client_configuration_starts_the_server_for_the_inspector(
    tmp_path: Path,
) -> None:
    inspector = npm_program("mcp-inspector-cli")
    text = CONFIG.read_text(encoding="utf-8")
    assert PLACEHOLDER in text
    work = tmp_path / "state"
    work.mkdir()
    filled = text.replace(f"{PLACEHOLDER}/.handrail", str(work)).replace(PLACEHOLDER, str(ROOT))
    server = json.loads(filled)["mcpServers"]["bookstore"]
    server["command"] = str(Path(sys.executable).parent / "handrail")  # this checkout's venv
    server["env"]["PATH"] = os.environ.get("PATH", "")
    keyring = Path(server["args"][server["args"].index("--keyring") + 1])
    keyring.write_text(Keyring.new_key_text("k1") + "\n", encoding="utf-8")
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"bookstore": server}}), encoding="utf-8")
    done = subprocess.run(  # noqa: S603 - our own pinned program, fixed arguments
        [str(inspector), "--cli", "--config", str(config), "--method", "tools/list"],
        cwd=tmp_path,  # the configuration must not depend on the client's directory
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(t["name"] for t in json.loads(done.stdout)["tools"]) == READABLE
