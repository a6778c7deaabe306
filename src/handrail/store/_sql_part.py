"""What a part of `SqlStore` (a mixin of its methods) may use of the store itself.

`SqlPart` declares the engine, the compiled statements and the store's `_write` and
`_read` helpers for the type checker, so each part (`SqlRuns`, `SqlConversations`)
lives in its own module without repeating them. It holds no state and does no work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

if TYPE_CHECKING:
    from handrail.store._statements import Statements

__all__ = ["SqlPart"]

T = TypeVar("T")


class SqlPart:
    """The base of `SqlStore`'s parts: its engine, statements and write/read helpers."""

    _engine: sa.Engine
    _sql: Statements

    if TYPE_CHECKING:

        def _write(
            self,
            what: str,
            work: Callable[[sa.Connection], T],
            connection: sa.Connection | None,
            *,
            single: bool = False,
        ) -> T: ...

        def _read(
            self,
            what: str,
            work: Callable[[sa.Connection], T],
            connection: sa.Connection | None,
        ) -> T: ...
