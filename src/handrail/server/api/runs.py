"""The HTTP API's runs: list, show with its document, replay from its recorded replies.

The caller's own runs (the tenant's with `handrail.audit.read`). A run the
caller may not see is 404, the same body as a missing one.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from handrail.runs import RunState
from handrail.server.api._deps import Limit, Ops
from handrail.server.api._views import replay_view, run_view
from handrail.server.auth import ApiPrincipal

__all__ = ["router"]

router = APIRouter(prefix="/runs", tags=["runs"])


@router.get("", summary="The caller's runs, most recently updated first")
async def list_runs(
    principal: ApiPrincipal, ops: Ops, state: RunState | None = None, limit: Limit = 50
) -> dict[str, Any]:
    records = await ops.list_runs(principal, state=state, limit=limit)
    return {"runs": [run_view(r) for r in records]}


@router.get("/{run_id}", summary="One run with its transcript, steps and end")
async def get_run(principal: ApiPrincipal, ops: Ops, run_id: str) -> dict[str, Any]:
    return run_view(await ops.get_run(principal, run_id), document=True)


@router.post("/{run_id}/replay", summary="Replay the run; reads run again, writes never do")
async def replay(principal: ApiPrincipal, ops: Ops, run_id: str) -> dict[str, Any]:
    return replay_view(await ops.replay(principal, run_id))
