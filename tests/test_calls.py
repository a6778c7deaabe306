"""ToolCall: ids kept verbatim, and a call whose id or name is not text is defective."""

from __future__ import annotations

import pytest

from handrail import ToolCall


@pytest.mark.parametrize(
    ("call_id", "name"),
    [("call_\ud800", "shop.search"), ("call_1", "shop.\udfffsearch"), ("\udc80", "\ud83d")],
    ids=["id", "name", "both"],
)
def test_a_lone_surrogate_in_the_id_or_name_makes_the_call_defective_but_keeps_it(
    call_id: str,
    name: str,
) -> None:
    call = ToolCall(id=call_id, name=name, arguments="{}")
    assert call.defect is not None
    assert (call.id, call.name) == (call_id, name)


def test_a_defect_the_adapter_found_first_is_kept() -> None:
    call = ToolCall(id="\ud800", name="shop.search", arguments=None, defect="cut off")
    assert call.defect == "cut off"


@pytest.mark.parametrize("call_id", ["call_1", "call\x00\x1b", "\u547c\U0001f600", ""])
def test_text_ids_and_names_leave_the_call_as_it_is(call_id: str) -> None:
    assert ToolCall(id=call_id, name="shop.search", arguments="{}").defect is None
