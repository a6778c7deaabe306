"""What the resource routers take from a request: the worker's Operations and a listing size."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from handrail.server.auth import services_of
from handrail.server.operations import MAX_LIMIT, Operations

__all__ = ["Limit", "Ops"]


def _operations(request: Request) -> Operations:
    return services_of(request).operations


Ops = Annotated[Operations, Depends(_operations)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many records.")]
