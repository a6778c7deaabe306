"""`handrail mcp serve` in-process: options to principal, keys and page; errors on one line.

The stdio loop itself is replaced here (test_stdio.py runs the real one in a
subprocess); what is checked is the server the command builds and that it is closed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from handrail import Keyring
from handrail.cli import app
from handrail.mcp.server import GatedServer
from handrail.writes.confirmation import KEYRING_ENV

APP = "tests.mcp._mcp_app:build"
BASE = ["mcp", "serve", "--app", APP, "--tenant", "t1", "--user", "alice"]


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[GatedServer]:
    servers: list[GatedServer] = []

    async def run_stdio(self: GatedServer) -> None:
        servers.append(self)

    monkeypatch.setattr(GatedServer, "run_stdio", run_stdio)
    monkeypatch.delenv(KEYRING_ENV, raising=False)
    monkeypatch.delenv("HANDRAIL_KEY_FILE", raising=False)
    return servers


def _invoke(*options: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*BASE, *options])
    return result.exit_code, result.stdout, result.stderr


def test_serve_builds_a_server_for_the_configured_principal_and_closes_it(
    served: list[GatedServer],
) -> None:
    code, out, _ = _invoke(
        "--store",
        "memory://",
        "-p",
        "reports.read",
        "--confirm-url",
        "https://shop.example/plans/{plan_id}",
        "--name",
        "library",
    )
    assert code == 0
    assert out == ""
    [server] = served
    assert server.lowlevel.name == "library"
    principal = server._principal()
    assert principal is not None
    assert (principal.tenant_id, principal.user_id) == ("t1", "alice")
    assert principal.permissions == frozenset({"reports.read"})
    assert server._confirm_url is not None
    assert server._confirm_url("p1") == "https://shop.example/plans/p1"
    # Closed on hang-up: the server no longer follows the registry.
    server.app.registry.deregister("lib.search")
    assert server._generation == 0


def test_without_permission_options_the_principal_holds_none(served: list[GatedServer]) -> None:
    code, _, _ = _invoke("--store", "memory://")
    assert code == 0
    principal = served[0]._principal()
    assert principal is not None
    assert principal.permissions == frozenset()


def test_write_tools_over_a_shared_store_need_keys(
    served: list[GatedServer], tmp_path: Path
) -> None:
    code, out, err = _invoke("--store", str(tmp_path / "h.db"))
    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert "keyring" in err
    assert served == []


def test_keys_come_from_a_file(served: list[GatedServer], tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(Keyring.new_key_text("k1") + "\n", encoding="utf-8")
    keys.chmod(0o600)
    code, _, err = _invoke("--store", str(tmp_path / "h.db"), "--keyring", str(keys))
    assert (code, err) == (0, "")
    assert len(served) == 1


def test_a_key_file_others_can_read_is_refused(served: list[GatedServer], tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(Keyring.new_key_text("k1") + "\n", encoding="utf-8")
    keys.chmod(0o644)
    code, _, err = _invoke("--store", "memory://", "--key-file", str(keys))
    assert code == 2
    assert "chmod 600" in err
    assert served == []


def test_a_key_file_that_is_not_keys_is_one_line(served: list[GatedServer], tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("not a key\n", encoding="utf-8")
    keys.chmod(0o600)
    code, _, err = _invoke("--store", "memory://", "--keyring", str(keys))
    assert code == 2
    assert err.startswith("error: ")
    assert served == []


def test_keys_come_from_the_environment(
    served: list[GatedServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEYRING_ENV, Keyring.new_key_text("k1"))
    code, _, err = _invoke("--store", str(tmp_path / "h.db"))
    assert (code, err) == (0, "")
    assert len(served) == 1


def test_an_unreadable_key_file_is_one_line(served: list[GatedServer], tmp_path: Path) -> None:
    code, _, err = _invoke("--store", "memory://", "--keyring", str(tmp_path / "missing"))
    assert code == 2
    assert err.startswith("error: ")
    assert served == []


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--confirm-url", "https://shop.example/plans"], "{plan_id}"),
        (["--user", ""], "--user"),
        (["--user", "a\x00b"], "NUL"),
    ],
)
def test_bad_options_are_refused_before_anything_is_opened(
    served: list[GatedServer], options: list[str], says: str
) -> None:
    code, out, err = _invoke("--store", "memory://", *options)
    assert code == 2
    assert out == ""
    assert says in err
    assert served == []
