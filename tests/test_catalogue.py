"""The approved catalogue: what it records per tool, reading it back, and the diff."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from _catalogue_apps import GOOD, QUERY, make_tool
from handrail import Registry
from handrail.declare.catalogue import (
    CATALOGUE_FORMAT,
    Catalogue,
    CatalogueError,
    ChangeKind,
    diff,
)
from handrail.spec import Deprecation, RiskLevel

DAY = date(2026, 6, 1)


def _catalogue(*tools: object) -> Catalogue:
    registry = Registry()
    for one in tools:
        registry.register(one)  # type: ignore[arg-type]
    return Catalogue.of(registry.specs())


def test_an_entry_records_what_the_model_sees_and_what_a_reviewer_approves() -> None:
    old = make_tool(
        "desk.old_reader",
        deprecation=Deprecation(after=DAY, replacement="desk.read_ticket"),
        rate_limit="10/minute",
    )
    (entry,) = _catalogue(old).document()["tools"]
    assert entry["description"] == old.spec.model_description
    assert entry["deprecation"] == {
        "after": "2026-06-01",
        "replacement": "desk.read_ticket",
        "note": "",
    }
    assert entry["risk"] == "L1_INTERNAL_READ"
    assert entry["owner"] == "support-team"
    assert entry["rate_limit"] == "10/minute"
    assert entry["input_schema"]["properties"]["id"]["type"] == "string"
    assert len(entry["hash"]) == 64


def test_a_catalogue_reads_back_equal_to_what_was_written() -> None:
    written = _catalogue(
        make_tool("desk.read_ticket"),
        make_tool("desk.old", deprecation=Deprecation(after=DAY, note="Going away.")),
    )
    again = Catalogue.parse(written.to_json())
    assert again == written
    assert again.to_json() == written.to_json()
    assert json.loads(written.to_json())["format"] == CATALOGUE_FORMAT


def test_a_catalogue_file_is_loaded_and_its_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "catalogue.json"
    path.write_text(_catalogue(make_tool("desk.read_ticket")).to_json(), encoding="utf-8")
    assert list(Catalogue.load(path).tools) == ["desk.read_ticket"]
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(CatalogueError, match=r"catalogue\.json"):
        Catalogue.load(path)


def test_the_hash_changes_with_the_description_and_the_schema_only() -> None:
    (base,) = _catalogue(make_tool("a.read_ticket")).tools.values()
    (described,) = _catalogue(make_tool("a.read_ticket", description=GOOD + " Now.")).tools.values()
    (schemed,) = _catalogue(make_tool("a.read_ticket", schema=QUERY, examples=())).tools.values()
    (owned,) = _catalogue(make_tool("a.read_ticket", owner="someone-else")).tools.values()
    assert len({base.hash, described.hash, schemed.hash}) == 3
    assert owned.hash == base.hash


def test_diff_lists_added_removed_and_changed_tools_with_why_they_matter() -> None:
    old = _catalogue(make_tool("desk.read_ticket"), make_tool("desk.gone"))
    new = _catalogue(
        make_tool(
            "desk.read_ticket",
            description=GOOD + " Prefer it to searching.",
            schema=QUERY,
            examples=(),
            deprecation=Deprecation(after=DAY),
        ),
        make_tool("desk.added"),
    )
    changes = {(c.tool, c.kind) for c in diff(old, new)}
    assert changes == {
        ("desk.added", ChangeKind.ADDED),
        ("desk.gone", ChangeKind.REMOVED),
        ("desk.read_ticket", ChangeKind.DESCRIPTION),
        ("desk.read_ticket", ChangeKind.SCHEMA),
        ("desk.read_ticket", ChangeKind.DEPRECATION),
    }
    described = next(c for c in diff(old, new) if c.kind is ChangeKind.DESCRIPTION)
    assert "changes which tool it picks" in described.note
    assert described.document()["after"].startswith(GOOD)


def test_diff_sees_a_risk_change_and_nothing_for_an_identical_catalogue() -> None:
    old = _catalogue(make_tool("desk.read_ticket"))
    public = _catalogue(make_tool("desk.read_ticket", risk=RiskLevel.L0_PUBLIC_READ))
    assert [(c.kind, c.before, c.after) for c in diff(old, public)] == [
        (ChangeKind.RISK, "L1_INTERNAL_READ", "L0_PUBLIC_READ"),
    ]
    assert diff(old, old) == ()
