"""Raw results kept for people behind a reference: storing, reading, listing, purging.

Owns the record, its retention and who may read it: only its own tenant, and there only
its owner or a holder of the raw-read permission. It never shapes a result and never
hands a raw body to a model; the model pages through the shaped view, never this one.
"""

from __future__ import annotations

import asyncio
import functools
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, timedelta
from typing import TYPE_CHECKING

from handrail.errors import AccessRefusedError, ConfigurationError, ErrorCode
from handrail.events import AuditSubject
from handrail.raw import RawRecord
from handrail.record.audit import Auditor
from handrail.text import escape_unstorable

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.principal import Principal
    from handrail.store.base import Store


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_RETENTION_SECONDS",
    "RAW_READ_PERMISSION",
    "RawResults",
    "new_raw_ref",
]


RAW_READ_PERMISSION = "handrail.raw.read"
"""Lets a principal read every raw record of its tenant, not only its own."""
DEFAULT_RETENTION_SECONDS = 7 * 86_400.0
DEFAULT_MAX_BYTES = 16 * 1024 * 1024

# Refs are opaque; anything else is refused before the store is asked.
_REF = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_TOOL = 128
_MAX_CALL_ID = 256
_MAX_MEDIA_TYPE = 128
_NOT_FOUND = "There is no such raw record."


def new_raw_ref() -> str:
    """A fresh random reference: `raw_` and 144 random bits, URL-safe."""
    return "raw_" + secrets.token_urlsafe(18)


class RawResults:
    """Stores full raw results for people and hands them out only within their tenant.

    A ref that is malformed, unknown, expired or of another tenant is refused with the
    one and same NOT_FOUND, so a ref never reveals whether it exists elsewhere. Inside
    the tenant, a reader who is neither the owner nor holds the permission is refused
    with PERMISSION_DENIED. Every read and refusal is audited when an auditor is given.
    """

    __slots__ = ("_auditor", "_clock", "_max_bytes", "_new_ref", "_retention", "_store")

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        new_ref: Callable[[], str] | None = None,
        auditor: Auditor | None = None,
    ) -> None:
        if not retention_seconds > 0:
            raise ConfigurationError("raw results need a positive retention")
        if max_bytes < 1:
            raise ConfigurationError("raw results need a positive max_bytes")
        self._store = store
        self._clock = clock
        self._retention = timedelta(seconds=retention_seconds)
        self._max_bytes = max_bytes
        self._new_ref = new_ref or new_raw_ref
        self._auditor = auditor

    @property
    def max_bytes(self) -> int:
        """The most bytes of a body kept; a longer one is cut and kept as incomplete."""
        return self._max_bytes

    @property
    def retention_seconds(self) -> float:
        """How long a record can be read after it was kept."""
        return self._retention.total_seconds()

    def keep(
        self,
        *,
        principal: Principal,
        tool: str,
        call_id: str,
        body: bytes,
        media_type: str,
        size: int | None = None,
        complete: bool = True,
    ) -> str:
        r"""Store a result for the principal's tenant and user; its ref.

        A body over `max_bytes` is cut to that many bytes and stored as incomplete.
        `size` is the size of the whole original (default: the body's length); a
        stored body shorter than it is never complete. The tool name and call id are
        clipped to the lengths the store keeps; a NUL or lone surrogate in the call id is
        kept as a `\uXXXX` escape.
        """
        data = bytes(body)
        whole = len(data) if size is None else size
        if whole < len(data):
            raise ValueError("size is the whole result's size: not less than the body")
        media = media_type.strip()
        if not media or len(media) > _MAX_MEDIA_TYPE or not media.isprintable():
            raise ValueError("media_type must be a short, printable media type")
        if len(data) > self._max_bytes:
            data = data[: self._max_bytes]
        ref = self._new_ref()
        if not _plausible(ref):
            raise ConfigurationError("the raw ref source made a ref outside [A-Za-z0-9_-]{1,64}")
        now = self._clock.now().astimezone(UTC)
        self._store.put_raw(
            RawRecord(
                ref=ref,
                tenant_id=principal.tenant_id,
                user_id=principal.user_id,
                tool=tool[:_MAX_TOOL],
                # The model's id, for people: every store must hold it (no NUL).
                call_id=escape_unstorable(call_id)[:_MAX_CALL_ID],
                created_at=now,
                expires_at=now + self._retention,
                media_type=media,
                size=whole,
                complete=complete and len(data) == whole,
                body=data,
            ),
        )
        return ref

    async def akeep(
        self,
        *,
        principal: Principal,
        tool: str,
        call_id: str,
        body: bytes,
        media_type: str,
        size: int | None = None,
        complete: bool = True,
    ) -> str:
        """`keep` in a worker thread: the store blocks."""
        work = functools.partial(
            self.keep,
            principal=principal,
            tool=tool,
            call_id=call_id,
            body=body,
            media_type=media_type,
            size=size,
            complete=complete,
        )
        return await asyncio.to_thread(work)

    def read(
        self,
        ref: str,
        principal: Principal,
        *,
        permission: str = RAW_READ_PERMISSION,
    ) -> RawRecord:
        """The record behind `ref`, for a reader of its tenant who may see it.

        Raises AccessRefusedError with NOT_FOUND (malformed, unknown, expired, another
        tenant's: all alike) or PERMISSION_DENIED (same tenant, neither the owner nor
        holding `permission`).
        """
        plausible = _plausible(ref)
        record = self._store.get_raw(ref) if plausible else None
        if (
            record is None
            or record.tenant_id != principal.tenant_id
            or record.expires_at <= self._clock.now()
        ):
            # Nothing of a record found in another tenant goes into this tenant's trail.
            shown = ref[:64] if isinstance(ref, str) else None
            self._audit(principal, None, ErrorCode.NOT_FOUND, {"ref": shown})
            raise AccessRefusedError(ErrorCode.NOT_FOUND, _NOT_FOUND)
        owner = record.user_id == principal.user_id
        if not owner and permission not in principal.permissions:
            self._audit(principal, record, ErrorCode.PERMISSION_DENIED, {"ref": ref})
            raise AccessRefusedError(
                ErrorCode.PERMISSION_DENIED,
                "Only the user who caused this raw record, or a holder of "
                f"{permission!r}, may read it.",
            )
        facts = {"ref": ref, "owner": record.user_id, "by": "owner" if owner else permission}
        self._audit(principal, record, None, facts)
        return record

    async def aread(
        self,
        ref: str,
        principal: Principal,
        *,
        permission: str = RAW_READ_PERMISSION,
    ) -> RawRecord:
        """`read` in a worker thread: the store blocks."""
        work = functools.partial(self.read, ref, principal, permission=permission)
        return await asyncio.to_thread(work)

    def purge(self) -> int:
        """Delete the records whose retention has ended; how many."""
        return self._store.purge_raw(before=self._clock.now())

    def _audit(
        self,
        principal: Principal,
        record: RawRecord | None,
        code: ErrorCode | None,
        facts: Mapping[str, object],
    ) -> None:
        if self._auditor is None or not self._auditor.enabled:
            return
        self._auditor.note(
            kind="raw",
            stage="read",
            decision="pass" if code is None else "refused",
            code=None if code is None else code.value,
            subject=AuditSubject(
                request_id=principal.request_id,
                tool_call_id=None if record is None else record.call_id,
                tool=None if record is None else record.tool,
                user_id=principal.user_id,
                tenant_id=principal.tenant_id,
            ),
            facts=facts,
        )


def _plausible(ref: object) -> bool:
    return isinstance(ref, str) and _REF.fullmatch(ref) is not None
