"""What every request handler of the service reaches: the parts, opened once per process.

`Services` is a frozen bundle (no globals): the application (`Handrail`: registry, gate,
writes, store, audit), the bearer authenticator for machine clients, the people's
authority for the console, the operations both faces share, the clock and this
worker's id. `open_services(config)` opens them from a `ServerConfig` and closes them
on exit; tests build a `Services` from parts they made themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from handrail.app import Handrail
from handrail.clock import Clock
from handrail.principal import Principal
from handrail.server.config import ServerConfig

if TYPE_CHECKING:
    from starlette.requests import Request

    from handrail.mcp.auth import Authenticator
    from handrail.server.operations import Operations

__all__ = ["PeopleAuthority", "Services", "open_services"]


class PeopleAuthority(Protocol):
    """The console's people: who a request's session cookie stands for.

    Implemented by the console (`handrail.server.console.people`). A session proves a
    person only while it is unexpired, unrevoked and its person enabled; the Principal
    is built from the stored person on every request, never from the request body.
    """

    async def principal_for(self, request: Request) -> Principal | None:
        """The person of the request's session, or None when it proves nothing."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Services:
    """The parts a request handler may use; built once per worker process."""

    config: ServerConfig
    handrail: Handrail
    bearer: Authenticator
    operations: Operations
    people: PeopleAuthority | None
    clock: Clock
    worker_id: str
    new_id: Callable[[], str]


@asynccontextmanager
async def open_services(config: ServerConfig) -> AsyncIterator[Services]:  # noqa: ARG001
    """Open the store, the application and the authenticators the config names; close on exit."""
    raise NotImplementedError  # the serve part builds this
    yield  # pragma: no cover
