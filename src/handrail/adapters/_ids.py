"""Call ids on the wire: verbatim where a format can carry them, else a reversible escape.

A provider's id goes back exactly as it came whenever the format (and the official
SDKs, which encode request bodies as UTF-8) can carry it. One it cannot (a lone
surrogate for any format; `.` or `:` for Anthropic) is written as `hr64_` and the
base64url of its bytes, in calls and results alike, so results still pair with their
calls; reading a transcript back undoes it exactly. It never changes an id anywhere
else: ToolCalls, envelopes and the gate keep ids as the provider sent them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from handrail.text import is_unicode

__all__ = ["ID_ESCAPE", "id_from_wire", "id_to_wire"]

ID_ESCAPE = "hr64_"
"""Marks an id the format cannot carry, sent as base64url of its UTF-8 (surrogates kept)."""


def id_to_wire(call_id: str, *, carried: Callable[[str], bool] = is_unicode) -> str:
    """The id itself when the format carries it; otherwise its reversible escape.

    `carried` says what the format takes; by default any Unicode text. An id that
    happens to start with the escape's prefix is escaped too, so reading back is exact.
    """
    if carried(call_id) and not call_id.startswith(ID_ESCAPE):
        return call_id
    encoded = base64.urlsafe_b64encode(call_id.encode("utf-8", "surrogatepass")).decode()
    return ID_ESCAPE + encoded.rstrip("=")


def id_from_wire(wire: str, *, carried: Callable[[str], bool] = is_unicode) -> str:
    """The exact inverse of `id_to_wire`; any other id is kept verbatim."""
    if not wire.startswith(ID_ESCAPE):
        return wire
    body = wire[len(ID_ESCAPE) :]
    try:
        decoded = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        call_id = decoded.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError):
        return wire
    return call_id if id_to_wire(call_id, carried=carried) == wire else wire
