"""For the `handrail plans` tests: a recovery ticket plan proposed by a model's call."""

from __future__ import annotations

import asyncio
import json
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

from examples.recovery import build_app as build_recovery

from handrail import Keyring, Principal, SigningKey, ToolCall, open_store
from handrail.plans import PlanRecord
from handrail.testing import FixedClock

RECOVERY_APP = "examples.recovery.app:build_app"
TICKET_TOOL = "recovery.create_recovery_ticket"
NURSE = Principal(
    user_id="u-1001",
    tenant_id="hospital-a",
    permissions=frozenset({"assets.read", "tickets.create"}),
)


def propose_ticket(store_url: str, service_db: Path, *, age: timedelta = timedelta(0)) -> str:
    """The id of a ticket plan the nurse's model proposed `age` ago (PROPOSED, unexpired)."""
    clock = FixedClock(datetime.now(UTC) - age)
    app = build_recovery(service_db=service_db, clock=clock)
    store = open_store(store_url)
    writes = app.writes(store, Keyring(SigningKey("test", secrets.token_bytes(32))))
    arguments = {"asset_id": "asset-lis-result", "reason": "timed out", "priority": "HIGH"}
    call = ToolCall(
        id="c1", name="recovery.create_recovery_ticket", arguments=json.dumps(arguments)
    )
    try:
        envelope = asyncio.run(app.gate(writes).handle(call, NURSE))
    finally:
        store.close()
        app.service.close()
    return str(envelope.data["plan_id"])


def stored_plan(store_url: str, plan_id: str) -> PlanRecord:
    """The plan as the store has it now."""
    store = open_store(store_url, migrate=False)
    try:
        record = store.get_plan(plan_id)
    finally:
        store.close()
    assert record is not None
    return record
