"""`handrail demo`: the bookstore and recovery examples, driven by scripted models.

The scenarios live with the examples (`examples/bookstore/demo.py`, then
`examples/recovery/demo.py`); this command only imports them from the current
directory, runs them in that order and turns any surprise into exit 2.
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
RECOVERY_RUNNER = "examples.recovery.demo:run_demo"
DEMO_RUNNERS = (DEMO_RUNNER, RECOVERY_RUNNER)
DEMO_PIPE_WIDTH = 100


class _DemoReport(Protocol):
    @property
    def unexpected(self) -> Sequence[object]: ...


class _DemoRunner(Protocol):
    def __call__(self, *, console: Console, audit_db: Path) -> _DemoReport: ...


@one_line_errors
def demo(*, db: DbOption = DEFAULT_DB) -> None:
    """Run the bookstore and recovery examples with scripted (not real) models.

    Needs the repository's examples/ folder in the current directory. The bookstore's
    audit events go to --db and its sample data is recreated next to it. The recovery
    scenario (a confirmed write whose response is lost, then reconciled) gets its own
    Handrail store, recovery.db, and its ticket service's database,
    recovery-tickets.db, both recreated next to --db.
    """
    runners: list[_DemoRunner] = []
    for target in DEMO_RUNNERS:
        try:
            runners.append(import_attribute(target, option="the demo"))
        except CliError as exc:
            raise CliError(
                f"{exc} (run the demo from the repository root, next to examples/)"
            ) from None
    console = console_for_output(DEMO_PIPE_WIDTH)
    unexpected = sum(len(run(console=console, audit_db=db).unexpected) for run in runners)
    if unexpected:
        raise CliError(f"{unexpected} demo outcome(s) differed from the script")
