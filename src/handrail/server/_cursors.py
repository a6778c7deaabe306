"""Opaque cursors of the audit search: where the next page starts, as URL-safe text.

A cursor names the last sequence number a page showed; the next page holds the older
events below it. It grants nothing: every search is scoped to the principal's tenant
whatever the cursor says, so a forged one only moves within what the caller may see.
"""

from __future__ import annotations

import base64
import binascii
import re

from handrail.errors import AccessRefusedError, ErrorCode

__all__ = ["decode_cursor", "encode_cursor"]

# "a2": events numbered by row and stage (migration 0014); a cursor of the earlier
# numbering ("a1") would start a page at another place, so it is refused instead.
_PREFIX = "a2:"
_SEQ = re.compile(r"[1-9][0-9]{0,17}")
_MAX_CURSOR = 64


def encode_cursor(seq: int) -> str:
    """The cursor continuing below `seq`."""
    return base64.urlsafe_b64encode(f"{_PREFIX}{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The sequence number of a cursor; INVALID_ARGUMENTS for anything this never made."""
    text = ""
    if len(cursor) <= _MAX_CURSOR and cursor.isascii():
        try:
            text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        except (binascii.Error, ValueError):
            text = ""
    seq = text.removeprefix(_PREFIX)
    if not text.startswith(_PREFIX) or _SEQ.fullmatch(seq) is None:
        raise AccessRefusedError(ErrorCode.INVALID_ARGUMENTS, "The cursor is not valid.")
    return int(seq)
