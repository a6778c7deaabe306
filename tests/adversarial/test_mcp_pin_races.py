"""Two proxies that approve new tools start at once: the one that loses the race still serves.

Both see the same new definition and pin it; the store keeps the first, and the
second's insert finds the place taken. That was a CONFLICT out of the connection's
tool check, so the second proxy could not use its upstream at all. Losing to an
approval of the same definition is now that approval done; losing to another
definition is still a CONFLICT.
"""

from __future__ import annotations

import dataclasses

import pytest

from handrail.errors import AccessRefusedError, ErrorCode
from handrail.mcp.pins import PinBook, PinStatus
from handrail.mcp.upstream import UpstreamTool
from handrail.pins import PinRecord
from handrail.store import MemoryStore


def _listed(description: str = "Look up a book.") -> UpstreamTool:
    return UpstreamTool(name="lookup", description=description, input_schema={"type": "object"})


class Racing(MemoryStore):
    """A store where another process pins `theirs` just before this one inserts."""

    def __init__(self, theirs: UpstreamTool) -> None:
        super().__init__()
        self._theirs = theirs

    def insert_pin(self, record: PinRecord) -> bool:
        super().insert_pin(
            dataclasses.replace(
                record,
                definition_hash=self._theirs.definition_hash(),
                definition=self._theirs.canonical(),
                approved_by="policy:approve_new (the other proxy)",
            )
        )
        return super().insert_pin(record)


def test_losing_a_first_approval_to_the_same_definition_is_that_approval() -> None:
    store = Racing(theirs=_listed())
    book = PinBook(store)

    pin = book.approve("books", _listed(), actor="policy:approve_new")

    assert pin.approved_by == "policy:approve_new (the other proxy)"
    assert book.check("books", _listed()).status is PinStatus.PINNED


def test_losing_a_first_approval_to_another_definition_is_a_conflict() -> None:
    book = PinBook(Racing(theirs=_listed("Something else.")))

    with pytest.raises(AccessRefusedError) as caught:
        book.approve("books", _listed(), actor="policy:approve_new")

    assert caught.value.code is ErrorCode.CONFLICT
