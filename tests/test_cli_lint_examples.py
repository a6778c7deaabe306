"""`handrail tools lint` over the real example applications.

The bookstore lints without errors (its warnings: no owners, one short description,
undescribed filter fields). The catalogue example's 180 generated back-office tools
are near-duplicates of one another by design (five verbs over the same subjects), and
that is the only error it has; Handrail's own catalogue tools (search_tools,
load_skill, read_skill_file) have no finding at all.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from handrail import cli

REPO = Path(__file__).resolve().parents[1]
META = {"search_tools", "load_skill", "read_skill_file", "run_skill_script"}


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # Each example's database is made in the current directory: a temporary one.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(REPO), str(REPO / "tests"), *sys.path])
    monkeypatch.delenv("HANDRAIL_APP", raising=False)
    return CliRunner()


def _lint(runner: CliRunner, app: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(cli.app, ["tools", "lint", "--json", "--app", app])
    return result.exit_code, json.loads(result.stdout)


def test_the_bookstore_lints_without_errors(runner: CliRunner) -> None:
    code, report = _lint(runner, "examples.bookstore:build_app")
    assert (code, report["errors"]) == (0, 0)
    rules = Counter((f["severity"], f["rule"]) for f in report["findings"])
    assert rules == {
        ("warning", "missing-owner"): 3,
        ("warning", "vague-description"): 1,
        ("warning", "undescribed-field"): 1,
        ("info", "missing-examples"): 3,
    }


def test_the_catalogue_examples_only_errors_are_its_generated_near_duplicates(
    runner: CliRunner,
) -> None:
    code, report = _lint(runner, "_integ_catalogue:example_catalogue")
    assert code == 1
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert report["errors"] == len(errors) > 0
    assert {f["rule"] for f in errors} == {"near-duplicate"}
    assert all(
        f["tool"].startswith("backoffice.") and f["other"].startswith("backoffice.") for f in errors
    )
