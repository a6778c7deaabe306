"""`handrail skills list|check DIR`: the skills of a library, and what is wrong with them.

Reads only: each skill folder is walked without following links and its SKILL.md read
within the limits, as an agent would load it. With `--app`, every tool a skill lists
must be registered in that application. Nothing is run, scripts included; text from the
skills is shown with its control characters escaped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from handrail.cli._common import (
    HelpCommand,
    HelpGroup,
    console_for_output,
    folding_table,
    load_registry,
    one_line_errors,
)
from handrail.cli._raw import shown

__all__ = ["skills_app"]

EXIT_PROBLEMS = 1

skills_app = typer.Typer(
    cls=HelpGroup, help="Skill folders (SKILL.md) and their checks.", no_args_is_help=True
)

_Directory = Annotated[Path, typer.Argument(help="The library: a directory of skill folders.")]
_AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        help="module:attribute of the application whose registry the skills' tools must be in.",
    ),
]


@skills_app.command("list", cls=HelpCommand)
@one_line_errors
def list_skills(directory: _Directory, *, app_target: _AppOption = None) -> None:
    """List the library's skills: name, description, tools, triggers, files.

    The library must load cleanly (see `handrail skills check`).
    """
    from handrail.skills import SkillLibrary  # noqa: PLC0415 - not for --help

    registry = None if app_target is None else load_registry(app_target)
    library = SkillLibrary.load(directory, registry=registry)
    table = folding_table(
        "name",
        "description",
        "allowed tools",
        "triggers",
        "references",
        "scripts",
        caption=f"{len(library)} skill(s) in {shown(str(library.root))}",
    )
    for skill in library.skills():
        table.add_row(
            skill.name,
            shown(skill.summary),
            shown(" ".join(sorted(skill.allowed_tools))) or "-",
            shown(", ".join(skill.triggers)) or "-",
            str(len(skill.references)),
            str(len(skill.scripts)),
        )
    console_for_output().print(table)


@skills_app.command("check", cls=HelpCommand)
@one_line_errors
def check_skills(directory: _Directory, *, app_target: _AppOption = None) -> None:
    """Check every skill folder; print each problem as file:line: message.

    Exits 1 when there is a problem, 0 when every skill loads.
    """
    from handrail.skills import check_library  # noqa: PLC0415 - not for --help

    registry = None if app_target is None else load_registry(app_target)
    skills, problems = check_library(directory, registry=registry)
    for problem in problems:
        typer.echo(shown(str(problem)))
    if problems:
        typer.echo(f"{len(problems)} problem(s); {len(skills)} skill(s) valid", err=True)
        raise typer.Exit(EXIT_PROBLEMS)
    typer.echo(f"ok: {len(skills)} skill(s)")
