"""`handrail tools lint` and `handrail tools diff`: review a tool catalogue before the model does.

Lint applies `declare.governance.lint` to every registered tool a model may see and
exits 1 when a finding is an error; diff compares two approved-catalogue files
(`handrail tools export --catalogue`) and says what the model will see differently.
Both only read; neither registers nor runs a tool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from handrail.cli._common import (
    DEFAULT_APP,
    AppOption,
    console_for_output,
    folding_table,
    load_registry,
    one_line_errors,
)
from handrail.cli._raw import json_shown, shown

if TYPE_CHECKING:
    from handrail.declare.catalogue import Change

__all__ = ["EXIT_FINDINGS", "diff_catalogues", "lint_tools"]

EXIT_FINDINGS = 1
"""The exit code of a lint with an error-level finding (2 is a usage or load error)."""
_SHOWN = 120

JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print JSON instead of a table."),
]


@one_line_errors
def lint_tools(
    *,
    app_target: AppOption = DEFAULT_APP,
    approved: Annotated[
        Path | None,
        typer.Option(
            "--approved",
            metavar="FILE",
            help=(
                "The approved catalogue (handrail tools export --catalogue): a tool whose "
                "description differs from it is an error, one missing from it a warning."
            ),
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Check the catalogue of every tool a model may see, by rules with fixed severities.

    Near-duplicate, vague or ownerless tools, missing examples, fields without
    descriptions, replacements that do not exist, unreviewed descriptions.

    Severities: near-duplicate, unknown-replacement and description-changed are errors
    (exit 1); unapproved-tool, vague-name, vague-description, missing-owner and
    undescribed-field are warnings; missing-examples is information.
    """
    from handrail.declare.catalogue import Catalogue  # noqa: PLC0415 - not for --help
    from handrail.declare.governance import Severity, lint  # noqa: PLC0415

    registry = load_registry(app_target)
    baseline = None if approved is None else Catalogue.load(approved)
    findings = lint(registry.specs(), approved=baseline, today=registry.today)
    errors = sum(f.severity is Severity.ERROR for f in findings)
    if as_json:
        document = {"errors": errors, "findings": [f.document() for f in findings]}
        typer.echo(json_shown(document))
    else:
        table = folding_table(
            "severity",
            "rule",
            "tool",
            "finding",
            caption=f"{len(findings)} finding(s), {errors} error(s), {len(registry)} tool(s)",
        )
        for finding in findings:
            tool = finding.tool if finding.other is None else f"{finding.tool} ~ {finding.other}"
            table.add_row(
                *_cells(finding.severity.value, finding.rule.value, tool, finding.message)
            )
        console_for_output().print(table)
    if errors:
        raise typer.Exit(EXIT_FINDINGS)


@one_line_errors
def diff_catalogues(
    *,
    old: Annotated[Path, typer.Argument(help="The approved catalogue, before.")],
    new: Annotated[Path, typer.Argument(help="The catalogue after the change.")],
    as_json: JsonOption = False,
) -> None:
    """Show what the model will see differently between two catalogue files.

    Added and removed tools, and changed descriptions, schemas, risk, side effects,
    deprecations and deferred loading. A changed description changes which tool the
    model picks: review it like code.
    """
    from handrail.declare.catalogue import Catalogue, diff  # noqa: PLC0415 - not for --help

    changes = diff(Catalogue.load(old), Catalogue.load(new))
    if as_json:
        document = {"changes": [change.document() for change in changes]}
        typer.echo(json_shown(document))
        return
    table = folding_table(
        "tool",
        "change",
        "before",
        "after",
        "why it matters",
        caption=f"{len(changes)} change(s) the model will see",
    )
    for change in changes:
        before, after = _summary(change)
        table.add_row(*_cells(change.tool, change.kind.value, before, after, change.note))
    console_for_output().print(table)


def _cells(*texts: str) -> tuple[Text, ...]:
    # A catalogue file is untrusted: its text is never read as markup or control codes.
    return tuple(Text(shown(text)) for text in texts)


def _summary(change: Change) -> tuple[str, str]:
    """Before and after, short enough for a table cell."""
    from handrail.declare.catalogue import ChangeKind  # noqa: PLC0415 - not for --help

    if change.kind in {ChangeKind.ADDED, ChangeKind.REMOVED}:
        entry = change.after if change.before is None else change.before
        text = _clip(str(entry["description"]))
        return ("-", text) if change.before is None else (text, "-")
    if change.kind is ChangeKind.SCHEMA:
        return _schema_summary(change.before, change.after)
    return _clip(_cell(change.before)), _clip(_cell(change.after))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _schema_summary(before: Any, after: Any) -> tuple[str, str]:  # noqa: ANN401 - JSON
    """The properties removed from and added to a schema, or that it changed within."""
    was = set((before.get("properties") or {}) if isinstance(before, dict) else {})
    now = set((after.get("properties") or {}) if isinstance(after, dict) else {})
    gone, added = sorted(was - now), sorted(now - was)
    if not gone and not added:
        return "properties: " + (", ".join(sorted(was)) or "-"), "changed within"
    return "removed: " + (", ".join(gone) or "-"), "added: " + (", ".join(added) or "-")


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
