"""Idempotency-Key records of the HTTP API: one per key a caller sent, and its answer.

Owns the stored record (`IdempotencyRecord`) and what makes two requests "the same"
(`request_fingerprint`). A record is RUNNING while the first request with its key is
being answered, then DONE with the response kept to replay. Keys are scoped by tenant
and user, so one caller's key never answers another's request. This module never
touches a store and knows nothing of HTTP framing (the middleware is
`handrail.server.idempotency`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

__all__ = [
    "MAX_KEY_CHARS",
    "IdempotencyRecord",
    "IdempotencyState",
    "request_fingerprint",
]

MAX_KEY_CHARS = 255
"""The longest Idempotency-Key kept (the store's column width)."""
_MAX_NAME = 256  # the store's column width for tenant and user
_MAX_CLAIM = 64
_MAX_CONTENT_TYPE = 256
_HASH = re.compile(r"[0-9a-f]{64}")
_DOMAIN = b"handrail idempotency v1\x00"


class IdempotencyState(StrEnum):
    """Where the first request of a key is."""

    RUNNING = "RUNNING"
    """Being answered; a repeat meanwhile is refused (409 IN_PROGRESS)."""
    DONE = "DONE"
    """Answered; a repeat with the same body gets the stored answer."""


def request_fingerprint(method: str, path: str, query: str, body: bytes) -> str:
    """SHA-256 over the method, path, query and body: equal exactly for the same request."""
    digest = hashlib.sha256(_DOMAIN)
    for part in (method.upper().encode(), path.encode(), query.encode()):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    digest.update(body)
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class IdempotencyRecord:
    """One key of one caller: the request it stands for and, once answered, the answer.

    `claim` names the request holding the key: finishing or releasing it is a
    compare-and-set on that claim, so a request whose claim lapsed (its `expires_at`
    passed while RUNNING, the worker presumably gone) cannot overwrite its successor.
    `expires_at` bounds a RUNNING claim by the request timeout and a DONE answer by
    the replay window; a record past it is as good as absent.
    """

    tenant_id: str
    user_id: str
    key: str
    fingerprint: str
    claim: str
    state: IdempotencyState
    created_at: datetime
    expires_at: datetime
    status: int | None = None
    content_type: str | None = None
    body: bytes | None = None

    def __post_init__(self) -> None:
        for name, value, longest in (
            ("tenant", self.tenant_id, _MAX_NAME),
            ("user", self.user_id, _MAX_NAME),
            ("key", self.key, MAX_KEY_CHARS),
            ("claim", self.claim, _MAX_CLAIM),
        ):
            if not value or len(value) > longest or "\x00" in value:
                msg = f"an idempotency record's {name} is 1 to {longest} characters, no NUL"
                raise ValueError(msg)
        if not _HASH.fullmatch(self.fingerprint):
            msg = "an idempotency record's fingerprint is a SHA-256 hex digest"
            raise ValueError(msg)
        if self.created_at.tzinfo is None or self.expires_at.tzinfo is None:
            msg = "an idempotency record's times carry a timezone"
            raise ValueError(msg)
        done = self.state is IdempotencyState.DONE
        if not done == (self.status is not None) == (self.body is not None):
            msg = "an idempotency record has a status and a body exactly when DONE"
            raise ValueError(msg)
        if self.content_type is not None and len(self.content_type) > _MAX_CONTENT_TYPE:
            msg = f"a content type is at most {_MAX_CONTENT_TYPE} characters"
            raise ValueError(msg)

    def same_request(self, fingerprint: str) -> bool:
        """Whether a request with `fingerprint` is the one this key was first used for."""
        return self.fingerprint == fingerprint

    def live(self, now: datetime) -> bool:
        """Whether the record still holds its key at `now`."""
        return now < self.expires_at
