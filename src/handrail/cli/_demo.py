"""`handrail demo`: the bookstore example driven through a Gate by a scripted model.

The scenarios live with the example (`examples/bookstore/demo.py`); this command only
imports them from the current directory, runs them and turns a surprise into exit 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from rich.console import Console

from handrail.cli._common import (
    DEFAULT_DB,
    CliError,
    DbOption,
    console_for_output,
    import_attribute,
    one_line_errors,
)

__all__ = ["demo"]

DEMO_RUNNER = "examples.bookstore.demo:run_demo"
DEMO_PIPE_WIDTH = 100


class _DemoReport(Protocol):
    @property
    def unexpected(self) -> Sequence[object]: ...


class _DemoRunner(Protocol):
    def __call__(self, *, console: Console, audit_db: Path) -> _DemoReport: ...


@one_line_errors
def demo(*, db: DbOption = DEFAULT_DB) -> None:
    """Run the bookstore example through a Gate with a scripted (not a real) model.

    Needs the repository's examples/ folder in the current directory. Audit events go
    to --db; the bookstore's sample data is recreated next to it.
    """
    try:
        run: _DemoRunner = import_attribute(DEMO_RUNNER, option="the demo")
    except CliError as exc:
        raise CliError(
            f"{exc} (run the demo from the repository root, next to examples/)"
        ) from None
    report = run(console=console_for_output(DEMO_PIPE_WIDTH), audit_db=db)
    if report.unexpected:
        raise CliError(f"{len(report.unexpected)} demo outcome(s) differed from the script")
