"""`handrail mcp serve --http` and `handrail keys`, as an operator runs them.

A key made by `handrail keys create` (shown once, on stdout alone) lets the SDK's
Streamable HTTP client list and call the tools of a server started as a subprocess
on 127.0.0.1 (port 0: the server picks a free one and announces its URL on stderr
once it listens); `keys revoke` ends it for that server at once; the server stops
cleanly on SIGINT. A JWT of the issuer given by `--jwt-issuer` and `--jwks`, for
this server's URL, works too (its tenant from `--tenant-claim`). The keys commands
stay inside one tenant and never print a secret again. Option mistakes are one-line
errors.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from typer.testing import CliRunner

from _mcp_http import WAIT_S, Signer, client, text_of
from handrail import Handrail, Keyring, Registry
from handrail.app import MEMORY
from handrail.cli import app as cli_app
from handrail.cli._common import CliError
from handrail.cli._mcp_http import authenticator_for, http_settings, parse_address
from handrail.mcp.keys import ApiKeys
from handrail.principal import Principal

ROOT = Path(__file__).resolve().parents[2]
HANDRAIL = str(Path(sys.executable).parent / "handrail")
APP = "tests.mcp._mcp_app:build"
ENV = {"PATH": os.environ.get("PATH", ""), "COLUMNS": "200"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own command with fixed arguments
        [HANDRAIL, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
        stdin=subprocess.DEVNULL,
        env=ENV,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "handrail.db"


@pytest.fixture
def keyring(tmp_path: Path) -> Path:
    keys = tmp_path / "keyring"
    keys.write_text(Keyring.new_key_text("k1") + "\n", encoding="utf-8")
    keys.chmod(0o600)
    return keys


class _Server:
    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url


@pytest.fixture
def signer() -> Signer:
    return Signer()


@pytest.fixture
def server(db: Path, keyring: Path, signer: Signer, tmp_path: Path) -> Iterator[_Server]:
    jwks = signer.write_jwks(tmp_path / "jwks.json")
    command = [HANDRAIL, "mcp", "serve", "--app", APP, "--store", str(db)]
    command += ["--keyring", str(keyring), "--http", "127.0.0.1:0"]
    command += ["--jwt-issuer", signer.issuer, "--jwks", str(jwks), "--tenant-claim", "org"]
    process = subprocess.Popen(  # noqa: S603 - our own command with fixed arguments
        command,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stderr is not None
    stderr = process.stderr
    reader = threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True)
    reader.start()
    try:
        first = lines.get(timeout=WAIT_S)
        assert first.startswith("handrail: serving MCP on http://127.0.0.1:"), first
        yield _Server(process, first.rsplit(" ", 1)[1].strip())
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(WAIT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(WAIT_S)
        reader.join(WAIT_S)
        stderr.close()


def _create(db: Path, *options: str) -> str:
    done = _cli("keys", "create", "--store", str(db), *options)
    assert done.returncode == 0, done.stderr
    assert "shown once" in done.stderr
    [key] = done.stdout.split()
    return key


@pytest.mark.anyio
async def test_a_key_from_the_cli_reaches_a_server_started_from_the_cli(
    server: _Server, db: Path
) -> None:
    key = _create(db, "--tenant", "t1", "--user", "alice", "-p", "reports.read")
    with anyio.fail_after(WAIT_S):
        async with client(server.url, key) as c:
            names = sorted(t.name for t in (await c.list_tools()).tools)
            found = await c.call_tool("lib.search", {"query": "em"})
            tenant = await c.call_tool("lib.whoami", {})
    assert "lib.secret_report" in names
    assert "Emma" in text_of(found)
    assert "t1" in text_of(tenant)
    key_id = key.split("_")[1]
    assert _cli("keys", "revoke", key_id, "--store", str(db), "--tenant", "t1").returncode == 0
    with anyio.fail_after(WAIT_S), pytest.raises(ExceptionGroup) as refused:
        async with client(server.url, key) as c:
            await c.list_tools()
    assert refused.group_contains(MCPError)
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(WAIT_S) == 0


@pytest.mark.anyio
async def test_a_jwt_of_the_configured_issuer_reaches_the_server(
    server: _Server, signer: Signer
) -> None:
    token = signer.token(server.url, sub="carol", org="t2", scope="")
    other_audience = signer.token(server.url + "/other", sub="carol", org="t2")
    with anyio.fail_after(WAIT_S):
        async with client(server.url, token) as c:
            names = sorted(t.name for t in (await c.list_tools()).tools)
            tenant = await c.call_tool("lib.whoami", {})
    assert "lib.search" in names
    assert "lib.secret_report" not in names
    assert "t2" in text_of(tenant)
    with anyio.fail_after(WAIT_S), pytest.raises(ExceptionGroup) as refused:
        async with client(server.url, other_audience) as c:
            await c.list_tools()
    assert refused.group_contains(MCPError)


def _create_here(db: Path, *options: str) -> str:
    done = CliRunner().invoke(cli_app, ["keys", "create", "--store", str(db), *options])
    assert done.exit_code == 0, done.output
    assert "shown once" in done.stderr
    [key] = done.stdout.split()
    return key


def test_keys_stay_in_their_tenant_and_are_never_shown_again(db: Path) -> None:
    key = _create_here(
        db, "--tenant", "t1", "--user", "alice", "--label", "ci", "-p", "a", "--role", "r"
    )
    _create_here(
        db, "--tenant", "t2", "--user", "mallory", "--scope", "region=eu", "--expires-in-days", "1"
    )
    key_id, secret = key.split("_", 2)[1:]
    runner = CliRunner()
    empty = runner.invoke(cli_app, ["keys", "list", "--store", str(db), "--tenant", "t3"])
    assert "no API keys in tenant t3" in empty.stdout
    listed = runner.invoke(cli_app, ["keys", "list", "--store", str(db), "--tenant", "t1"])
    assert listed.exit_code == 0, listed.output
    assert key_id in listed.stdout
    assert "alice" in listed.stdout
    assert "active" in listed.stdout
    assert "mallory" not in listed.stdout
    assert secret not in listed.stdout
    stolen = runner.invoke(
        cli_app, ["keys", "revoke", key_id, "--store", str(db), "--tenant", "t2"]
    )
    assert stolen.exit_code == 2
    assert "no active API key" in stolen.stderr
    revoked = runner.invoke(
        cli_app, ["keys", "revoke", key_id, "--store", str(db), "--tenant", "t1", "--by", "ops"]
    )
    assert revoked.exit_code == 0, revoked.output
    listed = runner.invoke(cli_app, ["keys", "list", "--store", str(db), "--tenant", "t1"])
    assert "revoked" in listed.stdout
    audit = runner.invoke(cli_app, ["audit", "tail", "--db", str(db), "--tenant", "t1"])
    assert secret not in audit.stdout


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--http", "nowhere"], "HOST:PORT"),
        (["--http", "127.0.0.1:99999"], "HOST:PORT"),
        (["--jwks", "x.json"], "need --http"),
        (["--http", "127.0.0.1:0", "--jwks", "x.json"], "go together"),
        (["--http", "127.0.0.1:0", "--no-api-keys"], "API keys or JWTs"),
        (["--http", "127.0.0.1:0", "--tenant", "t1"], "no --tenant"),
    ],
)
def test_http_option_mistakes_are_one_line_errors(options: list[str], message: str) -> None:
    args = ["mcp", "serve", "--app", APP, "--store", "memory://", *options]
    done = CliRunner().invoke(cli_app, args)
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith("error: ")
    assert message in done.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--user", "a", "--scope", "x"], "NAME=VALUE"),
        (["--user", ""], "must not be empty"),
        (["--user", "a\x00b"], "NUL"),
    ],
)
def test_a_key_for_no_valid_principal_is_refused(
    db: Path, options: list[str], message: str
) -> None:
    args = ["keys", "create", "--store", str(db), "--tenant", "t1", *options]
    done = CliRunner().invoke(cli_app, args)
    assert done.exit_code == 2
    assert message in done.stderr


@pytest.mark.anyio
async def test_the_authenticator_for_the_options_takes_keys_and_jwts(tmp_path: Path) -> None:
    signer = Signer()
    jwks = signer.write_jwks(tmp_path / "jwks.json")
    url = "http://127.0.0.1:8765/mcp"
    settings = http_settings(
        http="127.0.0.1:8765",
        api_keys=True,
        jwt_issuer=signer.issuer,
        jwt_audience=None,
        jwks=jwks,
        tenant_claim="org",
        resource_url=None,
        allowed_origins=None,
    )
    assert settings is not None
    with Handrail.open(MEMORY, registry=Registry()) as app:
        both = authenticator_for(settings, app, url)
        key = ApiKeys(app.store).create(Principal(user_id="u", tenant_id="t")).key
        assert await both.authenticate(key) == Principal(user_id="u", tenant_id="t")
        token = signer.token(url, org="acme", scope="")
        assert await both.authenticate(token) == Principal(user_id="alice", tenant_id="acme")
        only_jwt = authenticator_for(dataclasses.replace(settings, api_keys=False), app, url)
        assert await only_jwt.authenticate(key) is None
        only_keys = authenticator_for(dataclasses.replace(settings, jwt_issuer=None), app, url)
        assert await only_keys.authenticate(token) is None
        broken = dataclasses.replace(settings, jwks=tmp_path / "missing.json")
        with pytest.raises(CliError, match="JWKS"):
            authenticator_for(broken, app, url)


def test_an_address_is_host_and_port_or_a_port_on_loopback() -> None:
    assert parse_address("8000") == ("127.0.0.1", 8000)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:8443") == ("::1", 8443)
    assert parse_address("0.0.0.0:80") == ("0.0.0.0", 80)  # noqa: S104 - parsed, never bound
    for bad in ("", ":80", "host:", "host:http", "127.0.0.1:65536"):
        with pytest.raises(CliError):
            parse_address(bad)
