"""`handrail serve --config`: the real server in its own process, over real HTTP.

It binds 127.0.0.1 (a free port with `--port 0`), says where the API and console are,
answers calls with the Idempotency-Key honoured, and stops gracefully on SIGINT and
SIGTERM: exit 0, the audit of every answered call written to the store.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue

import httpx
import pytest
from _running import READ_TURN
from examples.service.app import DATABASE_ENV

from handrail import Keyring, Principal
from handrail.mcp.keys import ApiKeys
from handrail.store import open_store
from handrail.writes.confirmation import KEYRING_ENV

WAIT_S = 120.0
"""A generous bound for the server to start or stop on a loaded machine."""
HANDRAIL = str(Path(sys.executable).with_name("handrail"))


class Served:
    """One `handrail serve` process and what it said on stderr."""

    def __init__(self, process: subprocess.Popen[str], store: Path) -> None:
        self.process = process
        self.store = store
        self.lines: Queue[str] = Queue()
        self.said: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first stderr line matching `pattern` (bounded wait)."""
        while True:
            try:
                line = self.lines.get(timeout=WAIT_S)
            except Empty:
                pytest.fail(f"handrail serve never said {pattern!r}; it said {self.said}")
            self.said.append(line)
            if (found := re.search(pattern, line)) is not None:
                return found

    def key(self) -> str:
        store = open_store(self.store)
        try:
            principal = Principal(
                user_id="alice", tenant_id="acme", permissions=frozenset({"order.read"})
            )
            return ApiKeys(store).create(principal).key
        finally:
            store.close()

    def stop(self, sig: signal.Signals) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=WAIT_S)


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
    process = subprocess.Popen(  # noqa: S603 - our own CLI, an argument list
        [HANDRAIL, "serve", "--config", str(tmp_path / "handrail.toml")],
        env=env,
        cwd=Path(__file__).parents[2],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield Served(process, tmp_path / "h.db")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT_S)
        assert process.stderr is not None
        process.stderr.close()


def audited_calls(store_path: Path) -> int:
    store = open_store(store_path)
    try:
        events = store.read_audit(limit=1000, tenant_id="acme")
        return sum(1 for e in events if e.stage == "execute")
    finally:
        store.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_server_answers_over_http_and_stops_gracefully(
    served: Served, sig: signal.Signals
) -> None:
    url = served.wait_for(r"serving the API on (http://127\.0\.0\.1:\d+)/v1").group(1)
    console = served.wait_for(r"console on (\S+)").group(1)
    assert console == f"{url}/"
    token = served.key()
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
    assert audited_calls(served.store) == 1


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
