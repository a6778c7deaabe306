"""Who is at the console: the request's people authority, session and client address.

Console routes never accept a bearer token: a request is a person only through the
session cookie that `ConsolePeople` checks. Never renders anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.responses import Response

from handrail.errors import AccessRefusedError
from handrail.server.auth import services_of
from handrail.server.console._render import checked_form, redirect, refusal, to_login
from handrail.server.console.people import ConsolePeople

if TYPE_CHECKING:
    from starlette.datastructures import FormData
    from starlette.requests import Request

    from handrail.server.console.people import ConsoleSession

__all__ = ["Action", "client_of", "console_people", "posted", "viewer"]

Action = Callable[["ConsoleSession", "FormData"], Awaitable["str | Response"]]
"""What a console form does: the local path to go to next, or a refusal to answer with."""


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


async def posted(request: Request, action: Action) -> Response:
    """Answer a console form: a live session, its CSRF token, then `action`.

    Nobody logged in goes to login; a form without its token is refused before
    `action` reads any field; an operation's refusal is shown with its code; a path
    returned by `action` is where the browser goes next (303).
    """
    session = await viewer(request)
    if session is None:
        return to_login(request)
    form = await checked_form(request, session.csrf)
    if isinstance(form, Response):
        return form
    try:
        done = await action(session, form)
    except AccessRefusedError as refused:
        return refusal(request, refused.code, refused.message, session=session)
    return redirect(done) if isinstance(done, str) else done
