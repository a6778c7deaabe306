"""`handrail people`: add, list, disable, enable, unlock and set passwords, per tenant.

Passwords come from stdin (or a hidden prompt), never an argument; a login of another
tenant is "not found"; nothing prints a hash.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from handrail import cli
from handrail.store import open_store

PASSWORD = "correct horse battery staple\n"  # noqa: S105 - a test person's


def _run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(cli.app, list(args), input=stdin, env={"COLUMNS": "200"})


def test_a_person_is_added_from_stdin_listed_and_changed_within_their_tenant(tmp_path: Path):
    db = str(tmp_path / "h.db")
    added = _run(
        "people", "add", "alice@acme", "--tenant", "acme", "--user", "alice",
        "-p", "refund.approve", "--store", db, "--password-stdin", stdin=PASSWORD,
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    listed = _run("people", "list", "--tenant", "acme", "--store", db)
    assert "alice@acme" in listed.stdout
    assert "refund.approve" in listed.stdout
    assert "argon2" not in listed.stdout
    elsewhere = _run("people", "disable", "alice@acme", "--tenant", "globex", "--store", db)
    assert elsewhere.exit_code != 0
    assert _run("people", "disable", "alice@acme", "--tenant", "acme", "--store", db).exit_code == 0
    assert "disabled" in _run("people", "list", "--tenant", "acme", "--store", db).stdout
    assert _run("people", "enable", "alice@acme", "--tenant", "acme", "--store", db).exit_code == 0
    assert _run("people", "unlock", "alice@acme", "--tenant", "acme", "--store", db).exit_code == 0
    changed = _run(
        "people", "password", "alice@acme", "--tenant", "acme", "--store", db,
        "--password-stdin", stdin="another long password\n",
    )  # fmt: skip
    assert changed.exit_code == 0, changed.output
    store = open_store(db)
    try:
        person = store.get_person("alice@acme")
        kinds = {(e.kind, e.stage) for e in store.read_audit(limit=50)}
    finally:
        store.close()
    assert person is not None
    assert person.disabled_at is None
    assert ("console_person", "add") in kinds
    assert ("console_person", "password") in kinds


def test_a_short_password_or_a_taken_login_is_refused(tmp_path: Path):
    db = str(tmp_path / "h.db")
    short = _run(
        "people", "add", "bob@acme", "--tenant", "acme", "--store", db,
        "--password-stdin", stdin="short\n",
    )  # fmt: skip
    assert short.exit_code != 0
    first = _run(
        "people", "add", "bob@acme", "--tenant", "acme", "--store", db,
        "--password-stdin", stdin=PASSWORD,
    )  # fmt: skip
    again = _run(
        "people", "add", "bob@acme", "--tenant", "acme", "--store", db,
        "--password-stdin", stdin=PASSWORD,
    )  # fmt: skip
    assert first.exit_code == 0
    assert again.exit_code != 0


def test_no_command_takes_a_password_as_an_argument():
    for command in ("add", "password"):
        text = _run("people", command, "--help").stdout
        assert "--password-stdin" in text
        assert "--password " not in text
