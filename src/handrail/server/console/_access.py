"""Who is at the console: the request's people authority, session and client address.

Console routes never accept a bearer token: a request is a person only through the
session cookie that `ConsolePeople` checks. Never renders anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from handrail.server.auth import services_of
from handrail.server.console.people import ConsolePeople

if TYPE_CHECKING:
    from starlette.requests import Request

    from handrail.server.console.people import ConsoleSession

__all__ = ["client_of", "console_people", "viewer"]


def console_people(request: Request) -> ConsolePeople | None:
    """The service's console people, or None when the service has none (login disabled)."""
    people = services_of(request).people
    return people if isinstance(people, ConsolePeople) else None


async def viewer(request: Request) -> ConsoleSession | None:
    """The request's live console session, or None."""
    people = console_people(request)
    return None if people is None else await people.session_for(request)


def client_of(request: Request) -> str:
    """The client's address, which the login rate limit counts (the peer of the socket)."""
    return request.client.host if request.client is not None else "unknown"
