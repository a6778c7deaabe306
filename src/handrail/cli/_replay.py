"""`handrail replay RUN_ID`: re-run a stored agent run and say whether it still matches.

The run's recorded model replies are fed back by a scripted model, under the run's
recorded budget and a frozen clock; reads run again through the app's tools, writes
never run again (their recorded outcomes stand in). Prints each step's calls with the
recorded and replayed statuses; exits 1 when anything differs.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from handrail.cli._common import (
    AppOption,
    CliError,
    StoreOption,
    console_for_output,
    folding_table,
    load_registry,
    one_line_errors,
)
from handrail.cli._reconcile import open_existing_store

if TYPE_CHECKING:
    from handrail.loop.agent import ReplayReport, StepLog

__all__ = ["replay"]

MISMATCH = 1


@one_line_errors
def replay(
    run_id: Annotated[str, typer.Argument(help="The id of the stored run to replay.")],
    *,
    app_target: AppOption,
    store: StoreOption,
) -> None:
    """Replay a stored agent run from its recorded model replies and compare the outcomes.

    Reads are run again through the app's tools (--app); writes are never run again.
    Exit status 1 when a step or the end differs from the recorded run.
    """
    from handrail.clock import FixedClock  # noqa: PLC0415 - the core loads when it runs
    from handrail.gate import Gate  # noqa: PLC0415
    from handrail.loop.agent import AgentLoop, read_run  # noqa: PLC0415
    from handrail.loop.answers import EvidenceChecker  # noqa: PLC0415
    from handrail.loop.models import ScriptedModelClient  # noqa: PLC0415

    registry = load_registry(app_target)
    opened = open_existing_store(store)
    try:
        record = opened.get_run(run_id)
        if record is None:
            raise CliError(f"no run {run_id!r} in the store")
        data = read_run(record)
        # A frozen clock: the replay does not depend on how long anything takes now.
        clock = FixedClock()
        loop = AgentLoop(
            gate=Gate(registry, clock=clock),
            model=ScriptedModelClient(data.replies, record_requests=False),
            store=opened,
            budget=data.limits,
            clock=clock,
            checker=EvidenceChecker(opened),
        )
        report = asyncio.run(loop.replay(run_id))
    finally:
        opened.close()
    console = console_for_output()
    console.print(_table(report))
    console.print(Text(f"recorded end: {report.recorded_end}"))
    console.print(Text(f"replayed end: {report.replayed_end}"))
    if report.matched:
        console.print(Text("replay matched the recorded run"))
        return
    for difference in report.differences:
        console.print(Text(f"difference: {difference}"))
    raise typer.Exit(MISMATCH)


def _table(report: ReplayReport) -> Table:
    table = folding_table(
        "step", "kind", "call id", "tool", "recorded", "replayed", caption=f"run {report.run_id}"
    )
    for index in range(max(len(report.recorded), len(report.replayed))):
        recorded = _calls(report.recorded, index)
        replayed = _calls(report.replayed, index)
        kind = (
            report.recorded[index] if index < len(report.recorded) else report.replayed[index]
        ).kind
        ids = list(dict.fromkeys([*recorded, *replayed]))
        if not ids:
            table.add_row(str(index + 1), kind, "", "", "", "")
        for call_id in ids:
            tool = (recorded.get(call_id) or replayed[call_id])[0]
            table.add_row(
                str(index + 1),
                kind,
                call_id,
                tool,
                recorded[call_id][1] if call_id in recorded else "-",
                replayed[call_id][1] if call_id in replayed else "-",
            )
    return table


def _calls(steps: tuple[StepLog, ...], index: int) -> dict[str, tuple[str, str]]:
    if index >= len(steps):
        return {}
    return {c.call_id: (c.tool, c.describe()) for c in steps[index].calls}
