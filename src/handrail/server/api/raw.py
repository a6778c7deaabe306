"""The HTTP API's raw records: one full result by its ref, audited.

Read by its owner or a holder of `handrail.raw.read`. The ref takes the rest of the
path, so a malformed or traversing ref reaches the same refusal as a missing one:
404, the same body.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from handrail.server.api._deps import Ops
from handrail.server.api._views import raw_view
from handrail.server.auth import ApiPrincipal

__all__ = ["router"]

router = APIRouter(prefix="/raw", tags=["raw"])


@router.get("/{ref:path}", summary="A raw record by its ref (the body inside JSON)")
async def read(principal: ApiPrincipal, ops: Ops, ref: str) -> dict[str, Any]:
    return raw_view(await ops.raw(principal, ref))
