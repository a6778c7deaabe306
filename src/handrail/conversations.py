"""Conversation records: a chat's turns kept across runs, requests and processes.

Owns the record and its invariants (an opaque id, its tenant and user, aware times, a
turn count that only grows) and what a stored turn's text may hold. The store appends
turns one row each with a compare-and-set on the count; what a turn's text means is
the loop's. This module never reads a turn and never decides which run may add one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

__all__ = ["ConversationRecord", "check_turns"]

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_NAME = 256  # the stores' column width for tenant and user ids


@dataclass(frozen=True, kw_only=True, slots=True)
class ConversationRecord:
    """One stored conversation of one principal (tenant and user).

    `turns` is how many turns it holds (stored as rows `0 .. turns - 1`); `run_id` is
    the run that last started in it, which alone may append, or None before the first.
    """

    conversation_id: str
    tenant_id: str
    user_id: str
    turns: int
    run_id: str | None
    created_at: datetime
    updated_at: datetime

    def __post_init__(self) -> None:
        if not _ID.fullmatch(self.conversation_id):
            msg = "a conversation id is 1-64 characters of [A-Za-z0-9_-]"
            raise ValueError(msg)
        if self.run_id is not None and not _ID.fullmatch(self.run_id):
            msg = "a conversation's run id is 1-64 characters of [A-Za-z0-9_-]"
            raise ValueError(msg)
        if len(self.tenant_id) > _MAX_NAME or len(self.user_id) > _MAX_NAME:
            msg = f"a conversation's tenant and user ids are at most {_MAX_NAME} characters"
            raise ValueError(msg)
        if self.turns < 0:
            msg = "a conversation's turn count is never negative"
            raise ValueError(msg)
        if _naive(self.created_at) or _naive(self.updated_at):
            msg = "a conversation's times must be timezone-aware"
            raise ValueError(msg)


def check_turns(turns: Sequence[str]) -> None:
    """Refuse turn text no store can keep as it is: a NUL or a lone surrogate.

    PostgreSQL text cannot hold NUL and no database holds a lone surrogate; refusing
    both before any store is asked keeps every store's behaviour the same.
    """
    for text in turns:
        if not isinstance(text, str):
            msg = "a conversation turn is JSON text"
            raise TypeError(msg)
        if "\x00" in text:
            msg = "a conversation turn must not contain NUL characters"
            raise ValueError(msg)
        if not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError:
                msg = "a conversation turn must be valid Unicode (no lone surrogates)"
                raise ValueError(msg) from None


def _naive(value: datetime) -> bool:
    return value.tzinfo is None or value.utcoffset() is None
