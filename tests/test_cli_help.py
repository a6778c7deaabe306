"""Every command's --help reads cleanly: sentences unbroken, no `<bool>` beside flags."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import typer.main
from typer.testing import CliRunner

from handrail import cli
from handrail.cli._common import HelpCommand, HelpGroup

WIDE = "400"  # no line of help text is wrapped at this width: every break is the source's
_SENTENCE_END = re.compile(r"[.:)\]]$")


def _paths(command: object, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _paths(sub, (*path, name))


COMMANDS = list(_paths(typer.main.get_command(cli.app)))


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli.app, [*path, "--help"], env={"COLUMNS": WIDE})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_walk_finds_every_command_group_and_subcommand() -> None:
    names = {" ".join(path) for path in COMMANDS}
    for expected in ("", "audit tail", "runs show", "plans confirm", "tools export", "reconcile"):
        assert expected in names
    assert len(names) >= 20


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "handrail")
def test_help_has_no_broken_sentences_and_no_flag_placeholders(path: tuple[str, ...]) -> None:
    text = _help(path)
    assert "<bool>" not in text
    description = text.split("╭", 1)[0].splitlines()
    prose = [line.strip() for line in description if line.strip()]
    assert prose[0].startswith("Usage: ")
    for line in prose[1:]:
        # At this width a paragraph is one line; a line that stops mid-sentence was
        # broken by a line break in the source text.
        assert _SENTENCE_END.search(line), f"broken sentence in `{' '.join(path)} --help`: {line!r}"


def _prose(app: typer.Typer) -> tuple[list[str], str]:
    result = CliRunner().invoke(app, ["x", "--help"], env={"COLUMNS": WIDE})
    lines = [line.strip() for line in result.stdout.split("╭", 1)[0].splitlines() if line.strip()]
    return lines, result.stdout


def _say() -> None:
    """Say something.

    A paragraph whose
    lines break early.
    """


def test_plain_typer_keeps_source_line_breaks_and_flag_placeholders_that_the_check_catches() -> (
    None
):
    plain = typer.Typer()
    plain.command("x")(_say)
    plain.command("y")(_say)
    lines, text = _prose(plain)
    assert "A paragraph whose" in lines
    assert "<bool>" in text


def test_help_classes_join_paragraph_lines_and_drop_flag_placeholders() -> None:
    fixed = typer.Typer(cls=HelpGroup)
    fixed.command("x", cls=HelpCommand)(_say)
    fixed.command("y", cls=HelpCommand)(_say)
    lines, text = _prose(fixed)
    assert "A paragraph whose lines break early." in lines
    assert "<bool>" not in text
