"""The `Idempotency-Key` header on every POST under /v1 (IETF httpapi draft semantics).

`IdempotencyKeys` is an ASGI middleware inside `BodyLimit` (so the body is already
read and bounded). A POST with the header is scoped to its bearer's tenant and user
and fingerprinted (method, path, query, body, and the bearer's permissions, roles and
data scope: a narrower credential of the same user never gets a broader one's answer).
The first request with a key claims it in the store and runs; its answer (status,
content type, body) is kept for the replay window, unless it was a server failure
(5xx), which releases the key for a retry.
Then the same key with the same request gets the kept answer again (marked
`Idempotent-Replayed: true`), with another request 422 IDEMPOTENCY_KEY_REUSED, and
while the first still runs 409 IN_PROGRESS. A malformed key is 400
IDEMPOTENCY_KEY_INVALID. A request without a valid bearer passes through untouched:
the route refuses it, and nothing is stored for a caller nobody knows.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from typing import TYPE_CHECKING

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handrail.errors import ErrorCode, StoreError
from handrail.idempotency_keys import (
    MAX_KEY_CHARS,
    IdempotencyRecord,
    IdempotencyState,
    request_fingerprint,
)
from handrail.server.auth import AUTHENTICATED, bearer_token
from handrail.server.limits import replaying
from handrail.server.problems import ServiceCode, problem

if TYPE_CHECKING:
    from handrail.principal import Principal
    from handrail.server.services import Services
    from handrail.store.base import Store

__all__ = ["HEADER", "REPLAYED_HEADER", "IdempotencyKeys", "bound_fingerprint", "parse_key"]

HEADER = "idempotency-key"
REPLAYED_HEADER = "idempotent-replayed"
_KEY = re.compile(rf'"?([\x21\x23-\x5b\x5d-\x7e]{{1,{MAX_KEY_CHARS}}})"?')
_SERVER_ERROR = 500
_LEASE_FACTOR = 2  # a RUNNING claim outlives the request timeout by this much


def parse_key(value: str) -> str | None:
    """The key of a header value: an sf-string (`"..."`) or a bare token; None if malformed.

    Printable ASCII without quotes or backslashes, 1 to 255 characters; the quotes, if
    any, come as a pair.
    """
    match = _KEY.fullmatch(value)
    if match is None or value.startswith('"') != value.endswith('"') or value == '"':
        return None
    return match.group(1)


class IdempotencyKeys:
    """Claims, replays and refuses requests by their Idempotency-Key; see the module."""

    def __init__(self, app: ASGIApp, *, services: Services) -> None:
        self._app = app
        self._services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request under its key, or answer from (or refuse by) the key's record."""
        if scope["type"] != "http" or scope["method"] != "POST" or not _api(scope["path"]):
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        values = headers.getlist(HEADER)
        if not values:
            await self._app(scope, receive, send)
            return
        key = parse_key(values[0]) if len(values) == 1 else None
        if key is None:
            refusal = problem(
                ServiceCode.IDEMPOTENCY_KEY_INVALID,
                "Idempotency-Key is one quoted string of 1 to 255 printable characters",
            )
            await refusal(scope, receive, send)
            return
        principal = await self._principal(scope, headers)
        if principal is None:
            await self._app(scope, receive, send)
            return
        message = await receive()
        body: bytes = message.get("body", b"")
        try:
            await self._under_key(scope, receive, send, principal=principal, key=key, body=body)
        except StoreError:
            refusal = problem(ServiceCode.UNAVAILABLE, "the store cannot be reached; try again")
            await refusal(scope, receive, send)

    async def _principal(self, scope: Scope, headers: Headers) -> Principal | None:
        """The bearer's principal, kept in the scope's state for the route (one lookup)."""
        token = bearer_token(headers)
        found = None if token is None else await self._services.bearer.authenticate(token)
        if found is not None:
            scope.setdefault("state", {})[AUTHENTICATED] = found
        return found

    async def _under_key(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        principal: Principal,
        key: str,
        body: bytes,
    ) -> None:
        services = self._services
        http = services.config.server
        now = services.clock.now()
        query = scope.get("query_string", b"").decode("latin-1")
        fingerprint = bound_fingerprint(scope["method"], scope["path"], query, body, principal)
        claim = IdempotencyRecord(
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            key=key,
            fingerprint=fingerprint,
            claim=services.new_id(),
            state=IdempotencyState.RUNNING,
            created_at=now,
            expires_at=now + timedelta(seconds=http.request_timeout_seconds * _LEASE_FACTOR),
        )
        store = services.handrail.store
        held = await anyio.to_thread.run_sync(store.claim_idempotency_key, claim)
        if held is not None:
            await _answer_held(held, fingerprint)(scope, receive, send)
            return
        answer = _Captured()
        try:
            await self._app(scope, replaying(body, receive), answer.send)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_release, store, claim)
            raise
        if answer.status is None or answer.status >= _SERVER_ERROR:
            await anyio.to_thread.run_sync(_release, store, claim)
        else:
            done = IdempotencyRecord(
                tenant_id=claim.tenant_id,
                user_id=claim.user_id,
                key=key,
                fingerprint=fingerprint,
                claim=claim.claim,
                state=IdempotencyState.DONE,
                created_at=now,
                expires_at=services.clock.now() + timedelta(seconds=http.idempotency_seconds),
                status=answer.status,
                content_type=answer.content_type,
                body=answer.body(),
            )
            await anyio.to_thread.run_sync(store.finish_idempotency_key, done)
        await answer.replay(send)


def bound_fingerprint(method: str, path: str, query: str, body: bytes, principal: Principal) -> str:
    """The request's fingerprint, bound to what its credential may do.

    Another credential of the same user with other permissions, roles or data scope
    is another request (422), never handed the answer made for the first.
    """
    request = request_fingerprint(method, path, query, body)
    authority = json.dumps(
        [sorted(principal.permissions), sorted(principal.roles), dict(principal.data_scope)],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(f"{request}\n{authority}".encode()).hexdigest()


def _api(path: str) -> bool:
    return path.startswith("/v1/")


def _answer_held(held: IdempotencyRecord, fingerprint: str) -> Response:
    if not held.same_request(fingerprint):
        return problem(
            ServiceCode.IDEMPOTENCY_KEY_REUSED,
            "this Idempotency-Key was used with another request",
        )
    if held.state is IdempotencyState.RUNNING or held.status is None or held.body is None:
        return problem(
            ErrorCode.IN_PROGRESS,
            "the first request with this Idempotency-Key is still running",
            headers={"Retry-After": "1"},
        )
    return Response(
        content=held.body,
        status_code=held.status,
        media_type=held.content_type,
        headers={REPLAYED_HEADER: "true"},
    )


def _release(store: Store, claim: IdempotencyRecord) -> None:
    store.release_idempotency_key(
        tenant_id=claim.tenant_id, user_id=claim.user_id, key=claim.key, claim=claim.claim
    )


class _Captured:
    """The app's answer, held until it is kept, then sent on."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.content_type: str | None = None
        self._messages: list[Message] = []
        self._chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        self._messages.append(message)
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.content_type = Headers(raw=message.get("headers", [])).get("content-type")
        elif message["type"] == "http.response.body":
            self._chunks.append(message.get("body", b""))

    def body(self) -> bytes:
        return b"".join(self._chunks)

    async def replay(self, send: Send) -> None:
        for message in self._messages:
            await send(message)
