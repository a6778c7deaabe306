"""Both sides of the cross-process write tests: a downstream that never dedupes, the tool on it.

The parent test imports `Downstream`, `build_registry` and the shared constants; a child
runs this file as a script (`python _worker.py '<json config>'`) and speaks a line
protocol over its pipes: it prints `ready` once its store, registry and Writes are
built, waits for `go` on stdin, runs its share of `execute_plan` calls concurrently and
prints one JSON line with what each call returned. With a `hang` mode the tool prints
`running` and then blocks until the process is killed; with `until_released` it blocks
until the parent sends `release` (after the call's deadline has passed), and the child
prints `settled` once the late call's outcome is written.

The downstream is a SQLite file of its own: every tool call inserts a new row (no
unique constraint on the key), so a row count of 1 is proof of Handrail's exactly-once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

# The parent imports this module with tests/ on its path; a child gets it in PYTHONPATH.
from _threads import StartFirstPool
from handrail import Principal, Registry, RiskLevel, SideEffect, ToolContext, tool
from handrail.declare.hooks import Found, NotExecuted
from handrail.signing import SigningKey
from handrail.spec import ConfirmationMode, ConfirmationPolicy, ReconcilePolicy
from handrail.store import open_store
from handrail.writes.confirmation import Keyring
from handrail.writes.service import Writes

TOOL = "open_ticket"
LATENCY_S = 0.2
"""How long the downstream takes to open a ticket: duplicates overlap the RUNNING record."""
TOOL_TIMEOUT_S = 30.0
RECONCILE = ReconcilePolicy(not_found_grace=120.0, first_check=5.0, lease_grace=5.0)
"""A "not found" is proof only 120 s after the attempt; a lease outlives its deadline by 5 s."""
EXECUTE_TIMEOUT_S = 60.0
"""Each `execute_plan` in a child may wait this long for a running duplicate."""
HANG_LIMIT_S = 120.0
"""A hanging tool gives up after this long, should its parent fail to kill it."""
ABANDON_RECONCILE = ReconcilePolicy(not_found_grace=0.0, first_check=1e-6, lease_grace=600.0)
"""For the abandoned call: "not found" is proof at once and a check is due at once, were
the record not held; a lease outlives its deadline by ten minutes."""

ALICE = Principal(user_id="alice", tenant_id="t1", request_id="req-processes")
_SECRET = b"cross-process-confirmation-key-0123456789"


class Hang(StrEnum):
    """Where the tool stops and waits to be killed."""

    NONE = "none"
    BEFORE_EFFECT = "before_effect"
    AFTER_EFFECT = "after_effect"
    UNTIL_RELEASED = "until_released"
    """Before the effect, until `release` is set: the call outlives its deadline."""


def keyring() -> Keyring:
    """The same signing key in every process."""
    return Keyring(SigningKey("k1", _SECRET))


class Downstream:
    """A ticket system in a SQLite file: one new row per call, never deduplicated."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        # Autocommit: each statement is its own transaction; wait for other processes.
        return sqlite3.connect(self.path, timeout=30.0, isolation_level=None)

    def create(self) -> None:
        """Create the empty ticket table."""
        with closing(self._connect()) as db:
            db.execute(
                "CREATE TABLE tickets (ticket_id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "key TEXT NOT NULL, asset_id TEXT NOT NULL, pid INTEGER NOT NULL)",
            )

    def open_ticket(self, key: str, asset_id: str) -> dict[str, object]:
        """Open a new ticket for `key`, whether or not one exists: the effect to count."""
        with closing(self._connect()) as db:
            cursor = db.execute(
                "INSERT INTO tickets (key, asset_id, pid) VALUES (?, ?, ?)",
                (key, asset_id, os.getpid()),
            )
            ticket_id = cursor.lastrowid
        assert ticket_id is not None
        return _ticket(ticket_id, asset_id, os.getpid())

    def find(self, key: str) -> dict[str, object] | None:
        """The first ticket opened for `key`, as the tool returned it; None if none."""
        with closing(self._connect()) as db:
            row = db.execute(
                "SELECT ticket_id, asset_id, pid FROM tickets WHERE key = ? ORDER BY ticket_id",
                (key,),
            ).fetchone()
        return None if row is None else _ticket(row[0], row[1], row[2])

    def rows(self) -> list[tuple[str, int]]:
        """Every ticket ever opened, as (key, pid of the process that opened it)."""
        with closing(self._connect()) as db:
            return [(key, pid) for key, pid in db.execute("SELECT key, pid FROM tickets")]


def _ticket(ticket_id: int, asset_id: str, pid: int) -> dict[str, object]:
    return {"ticket_no": f"TK-{ticket_id:05d}", "asset_id": asset_id, "opened_by": pid}


def build_registry(
    downstream: Downstream,
    *,
    hang: Hang = Hang.NONE,
    announce: Callable[[], None] = lambda: None,
    policy: ReconcilePolicy = RECONCILE,
    release: threading.Event | None = None,
) -> Registry:
    """The registry every process builds: one confirmed external write on `downstream`."""

    def reconcile(key: str, ctx: ToolContext) -> Found | NotExecuted:
        found = downstream.find(key)
        return NotExecuted() if found is None else Found(found)

    def stop_here() -> None:
        announce()
        threading.Event().wait(HANG_LIMIT_S)
        raise RuntimeError("the hanging tool was not killed")

    @tool(
        name=TOOL,
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        timeout=TOOL_TIMEOUT_S,
        reconcile_policy=policy,
        reconcile=reconcile,
        business_id="ticket_no",
    )
    def open_ticket(
        ctx: ToolContext,
        asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]{1,6}$")],
    ) -> dict[str, object]:
        """Open a recovery ticket for an asset in the ticket system."""
        key = ctx.idempotency_key
        assert key is not None
        if hang is Hang.BEFORE_EFFECT:
            stop_here()
        if hang is Hang.UNTIL_RELEASED:
            assert release is not None
            announce()
            if not release.wait(HANG_LIMIT_S):
                raise RuntimeError("the parent never released the call")
        time.sleep(LATENCY_S)
        ticket = downstream.open_ticket(key, asset_id)
        if hang is Hang.AFTER_EFFECT:
            stop_here()
        return ticket

    registry = Registry()
    registry.register(open_ticket)
    return registry


# --- the child process ------------------------------------------------------------------------


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _serve(
    config: dict[str, Any],
    registry: Registry,
    *,
    pool: StartFirstPool | None = None,
    release: threading.Event | None = None,
) -> int:
    if pool is not None:
        # The tool's thread starts before its deadline's timer (see tests/_threads.py).
        asyncio.get_running_loop().set_default_executor(pool)
    store = open_store(config["store"])
    try:
        writes = Writes(registry, store, keyring(), worker_id=f"proc-{os.getpid()}")
        _say("ready")
        if sys.stdin.readline().strip() != "go":
            return 2
        outcomes = await asyncio.gather(
            *(
                writes.execute_plan(
                    config["plan_id"],
                    ALICE,
                    timeout=config.get("timeout", EXECUTE_TIMEOUT_S),
                    call_id=f"call-{os.getpid()}-{n}",
                )
                for n in range(config["calls"])
            ),
        )
        _say(
            json.dumps(
                [
                    {"envelope": outcome.envelope.to_model_dict(), "replayed": outcome.replayed}
                    for outcome in outcomes
                ],
            ),
        )
        if release is not None:
            # The call outlived its deadline and still runs; the parent says when it ends.
            if sys.stdin.readline().strip() != "release":
                return 2
            release.set()
            _say("settled" if await writes.executor.drain(HANG_LIMIT_S) else "unsettled")
    finally:
        store.close()
    return 0


def main(argv: list[str]) -> int:
    """Run one child: `argv[1]` is a JSON object with store, downstream, plan_id, calls, hang.

    And optionally `timeout`, the deadline of each `execute_plan` call.
    """
    config = json.loads(argv[1])
    hang = Hang(config["hang"])
    if hang is not Hang.UNTIL_RELEASED:
        registry = build_registry(
            Downstream(Path(config["downstream"])), hang=hang, announce=lambda: _say("running")
        )
        return asyncio.run(_serve(config, registry))
    pool = StartFirstPool()
    release = threading.Event()

    def inside() -> None:
        _say("running")
        pool.entered()

    registry = build_registry(
        Downstream(Path(config["downstream"])),
        hang=hang,
        announce=inside,
        policy=ABANDON_RECONCILE,
        release=release,
    )
    return asyncio.run(_serve(config, registry, pool=pool, release=release))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
