import pytest

from handrail import ErrorCode, Gate, Principal, Status, ToolCall


@pytest.mark.anyio
async def test_a_valid_read_call_returns_ok_with_the_call_id_kept(
    gate: Gate,
    principal: Principal,
) -> None:
    call = ToolCall(id="call_A1", name="shop.search", arguments='{"query": "dune"}')
    envelope = await gate.handle(call, principal)
    assert envelope.status is Status.OK
    assert envelope.call_id == "call_A1"
    assert envelope.data == [{"id": "b1", "title": "Dune", "stock": 3}]


@pytest.mark.anyio
async def test_a_sync_tool_with_a_validator_refuses_another_tenants_book(
    gate: Gate,
    outsider: Principal,
) -> None:
    call = ToolCall(id="c", name="shop.stock", arguments={"book_id": "b1"})
    envelope = await gate.handle(call, outsider)
    assert envelope.error_type is ErrorCode.NOT_FOUND
