"""`handrail serve --config`: the real server in its own process, over real HTTP.

It binds 127.0.0.1 (a free port with `--port 0`), says where the API and console are,
answers calls with the Idempotency-Key honoured, and stops gracefully on SIGINT and
SIGTERM: exit 0, the audit of every answered call written to the store.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _running import READ_TURN
from _served import HANDRAIL, WAIT_S, Served, start_serving
from examples.service.app import DATABASE_ENV

from handrail import Keyring, Principal
from handrail.mcp.keys import ApiKeys
from handrail.store import open_store
from handrail.writes.confirmation import KEYRING_ENV


def api_key(store_path: Path) -> str:
    """A key of alice's, who may read orders, in the store at `store_path`."""
    store = open_store(store_path)
    try:
        principal = Principal(
            user_id="alice", tenant_id="acme", permissions=frozenset({"order.read"})
        )
        return ApiKeys(store).create(principal).key
    finally:
        store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "handrail.toml").write_text(
        '[handrail]\nregistry = "examples.service.app:build"\nstore = "h.db"\n[server]\nport = 0\n'
    )
    env = {
        **os.environ,
        KEYRING_ENV: Keyring.new_key_text("k1"),
        DATABASE_ENV: str(tmp_path / "payments.db"),
    }
    server = start_serving(tmp_path / "handrail.toml", env=env)
    try:
        yield server
    finally:
        server.kill()


def audited_calls(store_path: Path) -> int:
    store = open_store(store_path)
    try:
        events = store.read_audit(limit=1000, tenant_id="acme")
        return sum(1 for e in events if e.stage == "execute")
    finally:
        store.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_server_answers_over_http_and_stops_gracefully(
    served: Served, sig: signal.Signals, tmp_path: Path
) -> None:
    url = served.wait_for(r"serving the API on (http://127\.0\.0\.1:\d+)/v1").group(1)
    console = served.wait_for(r"console on (\S+)").group(1)
    assert console == f"{url}/"
    token = api_key(tmp_path / "h.db")
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").status_code == 200
        first = client.post("/v1/calls/anthropic", json=READ_TURN, headers={"Idempotency-Key": "a"})
        again = client.post("/v1/calls/anthropic", json=READ_TURN, headers={"Idempotency-Key": "a"})
        assert client.get("/openapi.json").json()["paths"]["/v1/calls/{wire}"]
    assert first.status_code == 200
    assert first.json()["envelopes"][0]["status"] == "ok"
    assert again.headers["idempotent-replayed"] == "true"
    assert served.stop(sig) == 0
    assert audited_calls(tmp_path / "h.db") == 1


def test_a_config_that_does_not_hold_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "handrail.toml"
    bad.write_text('[handrail]\nregistry = "examples.service.app:build"\n[server]\nport = -1\n')
    done = subprocess.run(  # noqa: S603 - our own CLI, an argument list
        [HANDRAIL, "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ")
    assert "server.port" in done.stderr
