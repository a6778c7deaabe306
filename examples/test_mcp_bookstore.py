"""The bookstore served over MCP, end to end, as separate processes.

The example client (`python -m examples.mcp_bookstore.client`) starts `handrail mcp
serve` over stdio with the official SDK, for each sample tenant: it is offered the
three readable tools (never the forbidden one), finds its own tenant's book and stock,
and is refused another tenant in its arguments and another tenant's order. Every call
is in the store's audit trail under the server's tenant. The sample `mcp.json`, with its
placeholders filled in, starts the same server for the MCP Inspector's CLI, and the
README's HTTP commands (`handrail keys create`, `handrail mcp serve --http`) serve it to
the Inspector with that key as bearer token (skipped without the npm tools, except
under CI=true).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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
    keyring.chmod(0o600)
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


def _handrail(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own command with fixed arguments
        [str(Path(sys.executable).parent / "handrail"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_BOUND,
        check=False,
        stdin=subprocess.DEVNULL,
        env=env,
    )


@contextmanager
def _serving_http(work: Path, env: dict[str, str]) -> Iterator[str]:
    """`handrail mcp serve --http 127.0.0.1:0` for the bookstore; yields its URL."""
    command = [str(Path(sys.executable).parent / "handrail"), "mcp", "serve"]
    command += ["--app", "examples.mcp_bookstore.server:build_app"]
    command += ["--store", str(work / "mcp-bookstore.db"), "--keyring", str(work / "keys.txt")]
    command += ["--http", "127.0.0.1:0"]
    process = subprocess.Popen(  # noqa: S603 - our own command with fixed arguments
        command,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stderr is not None
    stderr = process.stderr
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stderr:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        first = lines.get(timeout=SUBPROCESS_BOUND)
        assert first.startswith("handrail: serving MCP on http://127.0.0.1:"), first
        yield first.rsplit(" ", 1)[1].strip()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(SUBPROCESS_BOUND)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(SUBPROCESS_BOUND)
        reader.join(SUBPROCESS_BOUND)
        stderr.close()


def test_the_readme_http_commands_serve_the_inspector_with_a_key(tmp_path: Path) -> None:
    inspector = npm_program("mcp-inspector-cli")
    (tmp_path / "keys.txt").write_text(Keyring.new_key_text("k1") + "\n", encoding="utf-8")
    (tmp_path / "keys.txt").chmod(0o600)
    env = {"PATH": os.environ.get("PATH", ""), "BOOKSTORE_DB": str(tmp_path / "bookstore.db")}
    created = _handrail(
        *("keys", "create", "--store", str(tmp_path / "mcp-bookstore.db")),
        *("--tenant", "globex", "--user", "gina", "-p", "inventory.read"),
        env=env,
    )
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    with _serving_http(tmp_path, env) as url:
        config = tmp_path / "mcp.json"
        entry = {"type": "streamable-http", "url": url}
        config.write_text(json.dumps({"mcpServers": {"bookstore-http": entry}}), encoding="utf-8")
        base = [str(inspector), "--cli", "--config", str(config), "--server", "bookstore-http"]
        bearer = ["--header", f"Authorization: Bearer {key}"]
        search = ["--tool-name", "bookstore.search_books", "--tool-arg", "query=Darwin"]
        runs = [
            subprocess.run(  # noqa: S603 - our own pinned program, fixed arguments
                [*base, *headers, "--method", *method],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_BOUND,
                check=False,
            )
            for headers, method in [
                (bearer, ["tools/list"]),
                (bearer, ["tools/call", *search]),
                ([], ["tools/list"]),
            ]
        ]
    listed, called, refused = runs
    assert listed.returncode == 0, listed.stderr
    names = sorted(t["name"] for t in json.loads(listed.stdout)["tools"])
    assert names == ["bookstore.check_inventory", "bookstore.search_books"]
    assert called.returncode == 0, called.stderr
    found = json.loads(called.stdout)["structuredContent"]["data"]
    assert [book["title"] for book in found] == [DARWIN["globex"]]
    assert refused.returncode != 0
