"""Catalogue files are untrusted: no control or bidi character of theirs reaches a terminal.

`json.dumps` escapes C0 controls but not C1 ones (U+009B is CSI, a terminal sequence
in one character), DEL, line separators or bidi overrides; `tools diff` and `tools
lint` print them escaped in tables and in `--json`, whose text still parses back to
exactly what the file said.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _catalogue_apps import make_tool
from handrail import Registry, cli
from handrail.cli._raw import json_shown
from handrail.declare.catalogue import Catalogue

HOSTILE = "Read a ticket \u009b31m red \u202egnp.exe\u2028 \x7f \u2066x\u2069 \u061c."
RAW = ("\u009b", "\u202e", "\u2028", "\x7f", "\u2066", "\u061c", "\x1b")


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    registry = Registry()
    registry.register(make_tool("desk.read_ticket"))
    registry.register(make_tool("desk.sneaky_ticket", description=HOSTILE))
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(Catalogue.of(registry.specs()[:1]).to_json(), encoding="utf-8")
    new.write_text(Catalogue.of(registry.specs()).to_json(), encoding="utf-8")
    return old, new


@pytest.mark.parametrize("as_json", [True, False])
def test_a_diff_never_prints_c1_controls_or_bidi_overrides(
    files: tuple[Path, Path], as_json: bool
) -> None:
    old, new = files
    options = ["--json"] if as_json else []
    result = CliRunner().invoke(cli.app, ["tools", "diff", *options, str(old), str(new)])
    assert result.exit_code == 0, result.output
    assert not [ch for ch in RAW if ch in result.stdout]
    if as_json:
        (change,) = json.loads(result.stdout)["changes"]
        assert change["after"]["description"] == HOSTILE


def test_the_json_lint_and_diff_print_stays_json_and_indented() -> None:
    document = {"findings": [{"message": HOSTILE}], "line": "a\nb\tc"}
    text = json_shown(document)
    assert not [ch for ch in RAW if ch in text]
    assert json.loads(text) == document
    assert text.count("\n") > 1  # still indented
