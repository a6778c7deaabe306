"""Pagination: signed, tenant-bound cursors into a stored result, a page at a time.

A result over budget whose tool pages (Overflow.PAGINATE) is stored as a raw record
and served in pages. The envelope's `cursor` is opaque to the model: it names the
record, the next offset, the tenant, the user and the tool, and expires; an HMAC
binds it all, so it cannot be altered, moved to another tenant or user, or forged.
The model passes it to the continuation tool, which reads the stored record (never
the tool again) and shapes the next page exactly like the first.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import rfc8785

from handrail.clock import Clock
from handrail.envelope import Omission, Trust
from handrail.errors import ConfigurationError, ErrorCode, Refusal
from handrail.principal import Principal
from handrail.signing import SigningKey

__all__ = ["CURSOR_PREFIX", "MAX_CURSOR", "CursorClaims", "Cursors", "Page"]

CURSOR_PREFIX = "hrp1"
MAX_CURSOR = 1024
"""The longest text accepted as a cursor."""
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_B64 = re.compile(r"[A-Za-z0-9_-]+")
_FIELDS = {"ref", "offset", "tenant", "user", "tool", "exp"}


@dataclass(frozen=True, kw_only=True, slots=True)
class CursorClaims:
    """What a verified cursor states."""

    ref: str
    offset: int
    tenant_id: str
    user_id: str
    tool: str
    expires_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    """One page of a stored list result, shaped, as the continuation tool returns it.

    `offset` is the index of the first item in the whole list and `total` the size of
    the list; `cursor` is None on the last page.
    """

    tool: str
    ref: str
    items: list[Any]
    offset: int
    total: int
    cursor: str | None
    omitted: tuple[Omission, ...] = ()
    redacted: dict[str, int] | None = None
    trust: Trust = Trust.UNTRUSTED
    source: str | None = None
    """The data block label of the original tool's results (None: `tool:<tool>`)."""


class Cursors:
    """Issues and opens pagination cursors; signs with the newest key, verifies with all."""

    def __init__(
        self,
        signing: SigningKey,
        *,
        clock: Clock,
        verifying: Iterable[SigningKey] = (),
        ttl_seconds: float = 3600.0,
    ) -> None:
        if ttl_seconds <= 0:
            raise ConfigurationError("a cursor's time to live must be positive")
        self._signing = signing
        self._keys = {key.key_id: key for key in (*verifying, signing)}
        self._clock = clock
        self._ttl = timedelta(seconds=ttl_seconds)

    def issue(self, *, ref: str, offset: int, principal: Principal, tool: str) -> str:
        """A cursor for `principal` to read `ref` from item `offset` on."""
        expires = self._clock.now() + self._ttl
        claims: dict[str, str | int] = {
            "ref": ref,
            "offset": offset,
            "tenant": principal.tenant_id,
            "user": principal.user_id,
            "tool": tool,
            "exp": int(expires.timestamp() * 1000),
        }
        payload = _b64(rfc8785.dumps(claims))
        key = self._signing
        return f"{CURSOR_PREFIX}.{key.key_id}.{payload}.{_mac(key, payload)}"

    def open(self, cursor: object, principal: Principal) -> CursorClaims:
        """The claims of a cursor issued to this principal that has not expired.

        Raises an INVALID_ARGUMENTS Refusal, the same for every reason (malformed,
        forged, altered, another tenant's or user's, expired), so that a cursor
        reveals nothing about records the caller may not read.
        """
        if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR:
            raise _invalid()
        parts = cursor.split(".")
        if len(parts) != 4 or parts[0] != CURSOR_PREFIX:  # noqa: PLR2004 - prefix.kid.payload.mac
            raise _invalid()
        _, key_id, payload, mac = parts
        key = self._keys.get(key_id) if _KEY_ID.fullmatch(key_id) else None
        if key is None or not _B64.fullmatch(payload) or not _B64.fullmatch(mac):
            raise _invalid()
        if not hmac.compare_digest(_mac(key, payload), mac):
            raise _invalid()
        claims = _claims(payload)
        if claims.tenant_id != principal.tenant_id or claims.user_id != principal.user_id:
            raise _invalid()
        if claims.expires_at <= self._clock.now():
            raise _invalid()
        return claims


def _claims(payload: str) -> CursorClaims:
    try:
        raw = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, binascii.Error):  # pragma: no cover - a valid MAC means we wrote it
        raise _invalid() from None
    if not isinstance(raw, dict) or set(raw) != _FIELDS:  # pragma: no cover - as above
        raise _invalid()
    return CursorClaims(
        ref=str(raw["ref"]),
        offset=int(raw["offset"]),
        tenant_id=str(raw["tenant"]),
        user_id=str(raw["user"]),
        tool=str(raw["tool"]),
        expires_at=datetime.fromtimestamp(int(raw["exp"]) / 1000, tz=UTC),
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _mac(key: SigningKey, payload: str) -> str:
    message = f"{CURSOR_PREFIX}.{key.key_id}.{payload}".encode()
    return _b64(hmac.new(key.secret, message, hashlib.sha256).digest())


def _invalid() -> Refusal:
    return Refusal(
        ErrorCode.INVALID_ARGUMENTS,
        "The cursor is not valid: it is unknown, altered or expired. Repeat the original "
        "call to get a fresh one.",
        stage="schema",
        field_errors={"$.cursor": "not a valid cursor"},
    )
