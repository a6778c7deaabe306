"""Who a request is: a bearer token (machine clients) or a console session (people).

API routes take `Depends(api_principal)`: the `Authorization: Bearer` token goes to
the service's Authenticator (API keys from the store, JWTs); no token, or one that
proves nothing, is a 401 UNAUTHENTICATED with `WWW-Authenticate`. Console routes take
`Depends(person)`: the session cookie, through the console's `PeopleAuthority`. The
Principal comes from the credential alone: no route reads a tenant or user from the
body, the query or a header other than the credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from handrail.principal import Principal
from handrail.server.problems import ServiceCode
from handrail.server.services import Services

__all__ = [
    "AUTHENTICATED",
    "ApiPrincipal",
    "NotAuthenticatedError",
    "Person",
    "api_principal",
    "bearer_token",
    "person",
    "services_of",
]

_MAX_TOKEN = 16_384

AUTHENTICATED = "handrail.principal"
"""The key, in an ASGI scope's state, of the principal its bearer token proved."""


class NotAuthenticatedError(HTTPException):
    """401: the request proves no principal. The app renders it as a problem body."""

    def __init__(self, message: str = "a valid bearer token is required") -> None:
        super().__init__(
            status_code=401,
            detail={"code": ServiceCode.UNAUTHENTICATED, "message": message},
            headers={"WWW-Authenticate": 'Bearer realm="handrail"'},
        )


def services_of(request: Request) -> Services:
    """The worker's Services, set on the app when it was created."""
    services: Services = request.app.state.services
    return services


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer` header, or None (absent, other scheme, too long)."""
    header = headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > _MAX_TOKEN:
        return None
    return token


async def api_principal(request: Request) -> Principal:
    """The principal of the request's bearer token; 401 UNAUTHENTICATED otherwise.

    A request the Idempotency-Key middleware authenticated already (`AUTHENTICATED`
    in its scope's state, from this same token) is not looked up a second time.
    """
    found = request.scope.get("state", {}).get(AUTHENTICATED)
    if isinstance(found, Principal):
        return found
    token = bearer_token(request.headers)
    if token is None:
        raise NotAuthenticatedError
    found = await services_of(request).bearer.authenticate(token)
    if found is None:
        raise NotAuthenticatedError
    return found


async def person(request: Request) -> Principal:
    """The person of the request's console session; 401 UNAUTHENTICATED otherwise."""
    people = services_of(request).people
    found = None if people is None else await people.principal_for(request)
    if found is None:
        raise NotAuthenticatedError("log in to the console")
    return found


ApiPrincipal = Annotated[Principal, Depends(api_principal)]
Person = Annotated[Principal, Depends(person)]
