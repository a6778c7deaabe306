from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _skill_folders import EXAMPLES, write_skill
from handrail import cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # --app imports from the current directory; keep its sys.path edit local.
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("COLUMNS", "250")
    return CliRunner()


def test_list_shows_each_skill_with_its_tools_and_triggers(runner: CliRunner) -> None:
    result = runner.invoke(
        cli.app,
        ["skills", "list", str(EXAMPLES), "--app", "examples.bookstore:build_app"],
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "│" in line]
    names = [row.split("│")[1].strip() for row in rows]
    assert [name for name in names if name] == [
        "inventory-report",
        "order-support",
        "release-notes",
    ]
    assert "bookstore.order_status bookstore.search_books" in result.output
    assert "order, refund, delivery, 订单" in result.output
    assert "3 skill(s) in" in result.output


def test_check_passes_against_the_bookstore_app(runner: CliRunner) -> None:
    result = runner.invoke(
        cli.app,
        ["skills", "check", str(EXAMPLES), "--app", "examples.bookstore:build_app"],
    )
    assert result.exit_code == 0, result.output
    assert result.output == "ok: 3 skill(s)\n"


def test_check_prints_each_problem_with_file_and_line(runner: CliRunner, tmp_path: Path) -> None:
    write_skill(tmp_path, "good")
    write_skill(tmp_path, "bad", front="name: bad\ndescription: d\npermissions: [admin]")
    write_skill(tmp_path, "tools", front="name: tools\ndescription: d\nallowed-tools: shell.exec")
    result = runner.invoke(
        cli.app,
        ["skills", "check", str(tmp_path), "--app", "examples.bookstore:build_app"],
    )
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        (
            "bad/SKILL.md:4: key 'permissions' tries to grant permissions or change risk; a skill "
            "can only narrow what a principal may do"
        ),
        "tools/SKILL.md:4: allowed-tools names 'shell.exec', which is not a registered tool",
    ]
    assert "2 problem(s); 1 skill(s) valid" in result.stderr


def test_problems_are_shown_with_control_characters_escaped(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    folder = write_skill(tmp_path, "skill")
    (folder / "evil\x1b[2Jname").write_text("x")
    result = runner.invoke(cli.app, ["skills", "check", str(tmp_path)])
    assert result.exit_code == 1
    assert "\x1b" not in result.stdout
    assert "skill/evil\\x1b[2Jname: has a name with control" in result.stdout


def test_list_refuses_a_library_with_problems(runner: CliRunner, tmp_path: Path) -> None:
    write_skill(tmp_path, "skill", front="name: other\ndescription: d")
    result = runner.invoke(cli.app, ["skills", "list", str(tmp_path)])
    assert result.exit_code == 2
    assert "skill/SKILL.md:2: name 'other' must equal the folder's name 'skill'" in result.stderr


def test_a_missing_directory_is_one_line_error(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["skills", "check", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: skill library")
