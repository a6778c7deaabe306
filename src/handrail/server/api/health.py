"""Whether this worker is up (`/healthz`) and can serve (`/readyz`).

`/healthz` answers 200 while the process runs, touching nothing. `/readyz` asks the
store for one indexed row and every probe the service was built with (Redis when
configured), each bounded in time: 200 when all answer, else 503 UNAVAILABLE naming
which part did not. Neither needs a credential, and neither says more than that.
"""

from __future__ import annotations

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from handrail.errors import StoreError
from handrail.server.auth import services_of
from handrail.server.problems import ServiceCode, problem
from handrail.server.services import Probe
from handrail.store.base import Store

__all__ = ["PROBES", "PROBE_SECONDS", "router"]

_HEALTHZ = "/healthz"
_READYZ = "/readyz"
PROBES = (_HEALTHZ, _READYZ)
"""The paths orchestrators poll every few seconds: no request span is made for them."""

PROBE_SECONDS = 5.0
"""How long one readiness check may take before it counts as down."""
_PROBE_KEY = "0" * 16  # an API key id that is never drawn: a primary-key read of nothing

router = APIRouter(tags=["health"])


@router.get(_HEALTHZ)
async def healthz() -> dict[str, str]:
    """200 while the process serves requests."""
    return {"status": "ok"}


@router.get(_READYZ, responses={503: {"description": "UNAVAILABLE: a part does not answer"}})
async def readyz(request: Request) -> Response:
    """200 when the store (and Redis, when configured) answer; 503 UNAVAILABLE otherwise."""
    services = services_of(request)
    checks = {"store": await _answers(_store_check(services.handrail.store))}
    for name, probe in services.probes.items():
        checks[name] = await _answers(probe)
    if all(checks.values()):
        return JSONResponse({"status": "ready", "checks": dict.fromkeys(checks, "ok")})
    down = sorted(name for name, ok in checks.items() if not ok)
    return problem(
        ServiceCode.UNAVAILABLE,
        f"not ready: {', '.join(down)} did not answer",
        details={"checks": {name: "ok" if ok else "down" for name, ok in checks.items()}},
    )


def _store_check(store: Store) -> Probe:
    async def check() -> bool:
        await anyio.to_thread.run_sync(store.get_api_key, _PROBE_KEY, abandon_on_cancel=True)
        return True

    return check


async def _answers(probe: Probe) -> bool:
    try:
        with anyio.fail_after(PROBE_SECONDS):
            return await probe()
    except (StoreError, TimeoutError, OSError):
        return False
