"""`handrail tools lint`, `tools export --catalogue` and `tools diff`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from handrail import cli
from handrail.canonical import canonical_json, sha256_hex

REPO = Path(__file__).resolve().parents[1]
APPS = "_catalogue_apps"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", [str(REPO / "tests"), *sys.path])
    monkeypatch.delenv("HANDRAIL_APP", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    return CliRunner()


def _export(runner: CliRunner, app: str, path: Path) -> Path:
    result = runner.invoke(cli.app, ["tools", "export", "--catalogue", "--app", f"{APPS}:{app}"])
    assert result.exit_code == 0, result.output
    path.write_text(result.stdout, encoding="utf-8")
    return path


def _edited_export(
    runner: CliRunner,
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], None],
) -> tuple[Path, Path]:
    """The clean app's catalogue, and a copy whose one entry `edit` changed (rehashed)."""
    old = _export(runner, "clean", tmp_path / "old.json")
    document = json.loads(old.read_text(encoding="utf-8"))
    (entry,) = document["tools"]
    edit(entry)
    document["tools"] = [_rehashed(entry)]
    new = tmp_path / "new.json"
    new.write_text(json.dumps(document), encoding="utf-8")
    return old, new


def test_lint_of_a_clean_catalogue_exits_0_with_a_table(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "lint", "--app", f"{APPS}:clean"])
    assert result.exit_code == 0, result.output
    assert "0 finding(s), 0 error(s), 1 tool(s)" in result.stdout


def test_lint_exits_1_on_near_duplicates_and_names_both_tools(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "lint", "--app", f"{APPS}:duplicates"])
    assert result.exit_code == 1
    assert "near-duplicate" in result.stdout
    assert "desk.find_tickets ~ desk.search_tickets" in result.stdout


def test_lint_as_json_lists_each_finding_with_rule_and_severity(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "lint", "--json", "--app", f"{APPS}:retiring"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["errors"] == 1
    (finding,) = document["findings"]
    assert finding["rule"] == "unknown-replacement"
    assert finding["severity"] == "error"
    assert finding["other"] == "desk.export_tickets"


def test_lint_with_the_approved_catalogue_flags_a_changed_description(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    approved = _export(runner, "clean", tmp_path / "approved.json")
    same = runner.invoke(
        cli.app,
        ["tools", "lint", "--app", f"{APPS}:clean", "--approved", str(approved)],
    )
    assert same.exit_code == 0, same.output
    document = json.loads(approved.read_text(encoding="utf-8"))
    old = _with_description(document, "An older description of the ticket reader.")
    approved.write_text(json.dumps(old), encoding="utf-8")
    changed = runner.invoke(
        cli.app,
        ["tools", "lint", "--json", "--app", f"{APPS}:clean", "--approved", str(approved)],
    )
    assert changed.exit_code == 1
    rules = [f["rule"] for f in json.loads(changed.stdout)["findings"]]
    assert rules == ["description-changed"]


def _with_description(document: dict[str, Any], text: str) -> dict[str, Any]:
    """The document with its one tool's description replaced, its hash recomputed."""
    (entry,) = document["tools"]
    return {**document, "tools": [_rehashed({**entry, "description": text})]}


def _rehashed(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry edited like a reviewer's tool would, with a hash that matches it again."""
    return {**entry, "hash": _hash_of(entry)}


def _hash_of(entry: dict[str, Any]) -> str:
    seen = {"name": entry["name"], "description": entry["description"]}
    return sha256_hex(canonical_json({**seen, "schema": entry["input_schema"]}))


def test_export_needs_exactly_one_of_format_and_catalogue(runner: CliRunner) -> None:
    neither = runner.invoke(cli.app, ["tools", "export"])
    both = runner.invoke(cli.app, ["tools", "export", "--catalogue", "-f", "jsonschema"])
    assert neither.exit_code == both.exit_code == 2
    assert "--format or --catalogue" in neither.stderr


def test_the_catalogue_export_never_lists_a_forbidden_tool(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "export", "--catalogue"])
    assert result.exit_code == 0, result.output
    names = [tool["name"] for tool in json.loads(result.stdout)["tools"]]
    assert "bookstore.search_books" in names
    assert "bookstore.delete_all_orders" not in names


def test_diff_shows_what_the_model_will_see_differently(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    old = _export(runner, "clean", tmp_path / "old.json")
    new = _export(runner, "retiring", tmp_path / "new.json")
    table = runner.invoke(cli.app, ["tools", "diff", str(old), str(new)])
    assert table.exit_code == 0, table.output
    assert "2 change(s) the model will see" in table.stdout
    as_json = runner.invoke(cli.app, ["tools", "diff", "--json", str(old), str(new)])
    changes = json.loads(as_json.stdout)["changes"]
    assert {(c["tool"], c["kind"]) for c in changes} == {
        ("desk.legacy_export", "added"),
        ("desk.old_ticket_reader", "added"),
    }
    back = runner.invoke(cli.app, ["tools", "diff", "--json", str(new), str(old)])
    assert {c["kind"] for c in json.loads(back.stdout)["changes"]} == {"removed"}


def test_diff_summarises_a_schema_and_description_change(
    runner: CliRunner,
    tmp_path: Path,
) -> None:

    def edit(entry: dict[str, Any]) -> None:
        entry["input_schema"] = {"type": "object", "properties": {"key": {"type": "string"}}}
        entry["description"] = "Read one ticket by key, with its whole history of comments."
        entry["deprecation"] = {"after": "2026-06-01", "replacement": None, "note": ""}

    old, new = _edited_export(runner, tmp_path, edit)
    result = runner.invoke(cli.app, ["tools", "diff", str(old), str(new)])
    assert result.exit_code == 0, result.output
    assert "removed: id" in result.stdout
    assert "added: key" in result.stdout
    assert "changes which tool it picks" in result.stdout
    assert "2026-06-01" in result.stdout


def test_diff_of_a_schema_changed_within_a_property_says_so(
    runner: CliRunner,
    tmp_path: Path,
) -> None:

    def edit(entry: dict[str, Any]) -> None:
        entry["input_schema"]["properties"]["id"]["maxLength"] = 12

    old, new = _edited_export(runner, tmp_path, edit)
    result = runner.invoke(cli.app, ["tools", "diff", "--json", str(old), str(new)])
    (change,) = json.loads(result.stdout)["changes"]
    assert change["kind"] == "schema"
    assert change["after"]["properties"]["id"]["maxLength"] == 12
    table = runner.invoke(cli.app, ["tools", "diff", str(old), str(new)])
    assert "properties: id" in table.stdout
    assert "changed within" in table.stdout


def test_diff_of_a_file_that_is_not_a_catalogue_exits_2_with_one_line(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2", encoding="utf-8")
    result = runner.invoke(cli.app, ["tools", "diff", str(bad), str(bad)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output
