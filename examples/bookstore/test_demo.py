"""The demo's scenarios end as scripted, and its audit trail is read back from SQLite."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from examples.bookstore.demo import run_demo, scenarios
from handrail.testing import FixedClock, sequential_ids


def test_every_demo_call_ends_as_its_scenario_expects(tmp_path: Path) -> None:
    out = io.StringIO()
    report = run_demo(
        console=Console(file=out, width=120),
        audit_db=tmp_path / "audit.db",
        clock=FixedClock(),
        new_id=sequential_ids("ev"),
    )
    assert report.unexpected == ()
    assert [e.outcome for e in report.exchanges] == [
        outcome for scenario in scenarios() for outcome in scenario.expected
    ]
    assert report.orders_left == 2


def test_the_demo_reads_back_exactly_its_own_audit_events(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    first = run_demo(console=Console(file=io.StringIO()), audit_db=db)
    second = run_demo(console=Console(file=io.StringIO()), audit_db=db)
    assert len(first.audit) == len(second.audit)
    assert {e.event_id for e in first.audit}.isdisjoint({e.event_id for e in second.audit})
    call_ids = {e.tool_call_id for e in second.audit if e.kind == "call"}
    assert call_ids == {exchange.call.id for exchange in second.exchanges}
    assert sum(e.kind == "registry" for e in second.audit) == 4


def test_the_demo_output_is_the_same_on_every_run(tmp_path: Path) -> None:
    outputs = []
    for run in range(2):
        out = io.StringIO()
        run_demo(console=Console(file=out, width=120), audit_db=tmp_path / f"audit-{run}.db")
        outputs.append(out.getvalue().replace(f"audit-{run}.db", "audit.db"))
    assert outputs[0] == outputs[1]
