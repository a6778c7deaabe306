from __future__ import annotations

import json

import pytest

from handrail import Envelope, ErrorCode, ErrorDetail, Status, ToolCall
from handrail.adapters._names import name_from_wire, name_to_wire
from handrail.adapters.base import ToolChoice, ToolChoiceMode
from handrail.adapters.transcript import CallIdLedger, ToolResult, pair_results
from handrail.envelope import Trust
from handrail.errors import ConfigurationError
from handrail.shaping.marking import DataMarker, read_block

MARKER = DataMarker()


def _call(call_id: str, name: str = "shop.search") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments="{}")


def _ok(call_id: str) -> Envelope:
    return Envelope(call_id=call_id, tool="shop.search", status=Status.OK, summary="s", data=1)


def _error(call_id: str) -> Envelope:
    return Envelope(
        call_id=call_id,
        tool="shop.search",
        status=Status.ERROR,
        summary="no",
        error=ErrorDetail(code=ErrorCode.NOT_FOUND),
    )


def test_results_are_paired_by_id_in_call_order_whatever_the_envelope_order() -> None:
    turn = pair_results([_call("a"), _call("b")], [_error("b"), _ok("a")], marker=MARKER)
    assert [(r.call_id, r.is_error) for r in turn.results] == [("a", False), ("b", True)]
    block = read_block(turn.results[1].content)
    assert block is not None
    assert json.loads(block.body)["error_type"] == "NOT_FOUND"


def test_a_result_for_an_unknown_id_or_a_missing_result_is_the_hosts_error() -> None:
    with pytest.raises(ConfigurationError):
        pair_results([_call("a")], [_ok("a"), _ok("zzz")], marker=MARKER)
    with pytest.raises(ConfigurationError):
        pair_results([_call("a"), _call("b")], [_ok("a")], marker=MARKER)
    with pytest.raises(ConfigurationError):
        pair_results([_call("a")], [_ok("a"), _ok("a")], marker=MARKER)


def test_calls_sharing_an_id_are_answered_in_order() -> None:
    turn = pair_results([_call("a"), _call("a")], [_ok("a"), _error("a")], marker=MARKER)
    assert [r.is_error for r in turn.results] == [False, True]


def test_a_result_carries_the_envelope_in_a_data_block_with_its_source_and_trust() -> None:
    envelope = _ok("a")
    content = ToolResult.of(envelope, DataMarker(token=lambda: "ab" * 16)).content
    assert content == (
        f'<<<handrail-data {"ab" * 16} source="tool:shop.search" trust="untrusted">>>\n'
        f"{envelope.to_json()}\n<<<end handrail-data {'ab' * 16}>>>"
    )
    block = read_block(content)
    assert block is not None
    assert (block.source, block.trust) == ("tool:shop.search", Trust.UNTRUSTED)


def test_each_result_of_a_turn_gets_its_own_boundary() -> None:
    turn = pair_results([_call("a"), _call("b")], [_ok("a"), _ok("b")], marker=MARKER)
    blocks = [read_block(r.content) for r in turn.results]
    assert None not in blocks
    assert len({b.boundary for b in blocks if b is not None}) == 2


def test_the_ledger_marks_an_id_reused_in_a_later_turn_and_keeps_other_defects() -> None:
    ledger = CallIdLedger()
    first = ledger.admit([_call("a"), _call("b")])
    assert [c.defect for c in first] == [None, None]
    second = ledger.admit([_call("a"), _call("c")])
    assert second[0].defect is not None
    assert second[1].defect is None
    truncated = ToolCall(id="b", name="x", arguments="{", defect="cut off")
    assert ledger.admit([truncated])[0].defect == "cut off"


def test_a_tool_choice_names_a_tool_exactly_when_forced() -> None:
    assert ToolChoice().mode is ToolChoiceMode.AUTO
    assert ToolChoice.forced("shop.search").tool == "shop.search"
    with pytest.raises(ConfigurationError):
        ToolChoice(mode=ToolChoiceMode.TOOL)
    with pytest.raises(ConfigurationError):
        ToolChoice(mode=ToolChoiceMode.AUTO, tool="shop.search")


@pytest.mark.parametrize(
    ("wire", "name"),
    [("shop__search", "shop.search"), ("plain", "plain"), ("bad name!", "bad name!")],
)
def test_lenient_names_map_what_they_can_and_keep_the_rest_verbatim(wire: str, name: str) -> None:
    assert name_from_wire(wire) == name
    assert name_to_wire(name) == wire
