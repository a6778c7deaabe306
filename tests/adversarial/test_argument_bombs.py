"""Stage 1 under attack: whatever arrives as arguments, the answer is a structured envelope.

Each attack goes to `probe.echo`, a tool that would happily run on `{}`; a refused call
must leave it untouched, keep the call id, and read as strict, bounded, UTF-8 JSON.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Tool,
    ToolCall,
)

pytestmark = pytest.mark.anyio

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]
Refuse = Callable[..., Awaitable[dict[str, Any]]]
Accept = Callable[[object], Awaitable[dict[str, object]]]

FIFTY_MB = 50 * 1024 * 1024
DEPTH_BOMB = 100_000


def _deep_dict(levels: int) -> dict[str, object]:
    root: dict[str, object] = {}
    node = root
    for _ in range(levels):
        child: dict[str, object] = {}
        node["a"] = child
        node = child
    return root


def _deep_list(levels: int) -> list[object]:
    root: list[object] = []
    node = root
    for _ in range(levels):
        child: list[object] = []
        node.append(child)
        node = child
    return root


# --- nesting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"note": ' + "[" * DEPTH_BOMB + "]" * DEPTH_BOMB + "}",
        '{"note": ' + "[" * DEPTH_BOMB,
        '{"note": ' + '{"a":' * DEPTH_BOMB + "1" + "}" * DEPTH_BOMB + "}",
    ],
    ids=["balanced-arrays", "unterminated-arrays", "objects"],
)
async def test_a_hundred_thousand_levels_of_json_nesting_are_refused(
    refuse: Refuse,
    text: str,
) -> None:
    await refuse(text)


@pytest.mark.parametrize("build", [_deep_dict, _deep_list], ids=["dict", "list"])
async def test_a_hundred_thousand_levels_of_decoded_nesting_are_refused(
    refuse: Refuse,
    build: Callable[[int], object],
) -> None:
    deep = build(DEPTH_BOMB)
    await refuse({"note": deep})


async def test_a_self_referencing_object_is_refused_rather_than_walked_forever(
    refuse: Refuse,
) -> None:
    loop: dict[str, object] = {}
    loop["again"] = loop
    await refuse({"note": loop})


async def test_a_hundred_thousand_values_within_the_byte_limit_are_refused(
    refuse: Refuse,
) -> None:
    text = '{"note": [' + ",".join(["0"] * 100_000) + "]}"
    await refuse(text)


# --- size --------------------------------------------------------------------------------------


async def test_a_fifty_megabyte_json_text_is_refused_without_echoing_it(
    refuse: Refuse,
) -> None:
    text = '{"note": "' + "A" * FIFTY_MB + '"}'
    shown = await refuse(text)
    assert "AAAA" not in str(shown)


async def test_fifty_megabytes_of_bytes_are_refused(
    refuse: Refuse,
) -> None:
    data = b'{"note": "' + b"A" * FIFTY_MB + b'"}'
    await refuse(data)


async def test_a_fifty_megabyte_string_in_decoded_arguments_is_refused(
    refuse: Refuse,
) -> None:
    await refuse({"note": "A" * FIFTY_MB})


# --- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"count": NaN}',
        '{"count": Infinity}',
        '{"count": -Infinity}',
        '{"count": 1e400}',
        '{"count": -1e400}',
    ],
)
async def test_nan_and_infinities_in_json_text_are_refused(
    refuse: Refuse,
    text: str,
) -> None:
    await refuse(text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
async def test_nan_and_infinities_in_decoded_arguments_are_refused(
    refuse: Refuse,
    value: float,
) -> None:
    await refuse({"count": 1, "note": [value]})


@pytest.mark.parametrize(
    "arguments",
    [
        '{"count": 9007199254740992}',
        '{"count": -9007199254740992}',
        '{"count": 18446744073709551616}',
        {"count": 2**53},
        {"count": -(2**64)},
        '{"count": ' + "9" * 4000 + "}",
    ],
    ids=["2**53", "-2**53", "2**64", "dict-2**53", "dict--2**64", "4000-digits"],
)
async def test_integers_beyond_the_safe_range_are_refused(
    refuse: Refuse,
    arguments: object,
) -> None:
    await refuse(arguments)


async def test_the_largest_safe_integer_is_accepted(accept: Accept) -> None:
    received = await accept('{"count": -9007199254740991}')
    assert received == {"note": "", "count": -(2**53 - 1)}


async def test_a_five_thousand_digit_integer_is_refused_in_handrails_own_words(
    refuse: Refuse,
) -> None:
    text = '{"count": ' + "7" * 5000 + "}"
    shown = await refuse(text)
    # Python's own message for this advises a Python API; the model must not read it.
    assert "set_int_max_str_digits" not in str(shown)
    assert "7777" not in str(shown)


# --- keys --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"role": "user", "role": "admin"}',
        '{"note": "first", "note": "second"}',
        '{"note": "first", "n\\u006fte": "second"}',
        '{"note": "x", "count": 1, "extra": {"a": 1, "a": 2}}',
    ],
    ids=["role", "declared-field", "escaped-spelling", "nested"],
)
async def test_a_duplicate_key_is_refused_instead_of_the_last_one_winning(
    refuse: Refuse,
    text: str,
) -> None:
    await refuse(text)


@pytest.mark.parametrize(
    "arguments",
    [{1: "a"}, {None: "a"}, {("note",): "a"}, {b"note": "a"}, {"note": "x", "more": [{2: 3}]}],
    ids=["int", "none", "tuple", "bytes", "nested"],
)
async def test_non_string_keys_in_decoded_arguments_are_refused(
    refuse: Refuse,
    arguments: Mapping[object, object],
) -> None:
    await refuse(arguments)


# --- text encoding -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'{"note": "\xff"}',
        b'{"note": "\xc0\xaf"}',
        b'{"note": "\xe2\x82"}',
        b'{"note": "\xed\xa0\x80"}',
        b"\xfe\xff\x00{\x00}",
    ],
    ids=["0xff", "overlong", "truncated", "encoded-surrogate", "utf-16"],
)
async def test_invalid_utf8_bytes_are_refused(
    refuse: Refuse,
    data: bytes,
) -> None:
    await refuse(data)


@pytest.mark.parametrize(
    "arguments",
    [
        '{"note": "\\ud800"}',
        '{"note": "\\udfff tail"}',
        '{"note": "\ud800"}',
        '{"\\ud83d": "x"}',
        {"note": "ok \udc80"},
        {"note": ["\ud83d\ude00"]},
    ],
    ids=["escaped-high", "escaped-low", "raw-in-text", "escaped-key", "dict", "split-pair"],
)
async def test_lone_surrogates_are_refused_at_the_syntax_stage(
    refuse: Refuse,
    arguments: object,
) -> None:
    await refuse(arguments)


async def test_a_lone_surrogate_never_reaches_a_raw_schema_tools_business_code(
    gate: Gate,
    principal: Principal,
    registry: Registry,
    wire: WireCheck,
) -> None:
    ran: list[object] = []
    raw = Tool.from_json_schema(
        name="probe.raw",
        description="Echo a string.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        fn=lambda arguments, _ctx: ran.append(arguments),
        risk=RiskLevel.L0_PUBLIC_READ,
    )
    registry.register(raw)
    call = ToolCall(id="c", name="probe.raw", arguments='{"text": "\\udbff"}')
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert ran == []
    wire(envelope, call)


async def test_an_escaped_surrogate_pair_is_one_character_and_accepted(accept: Accept) -> None:
    received = await accept('{"note": "\\ud83d\\ude00"}')
    assert received == {"note": "\U0001f600", "count": 0}


# --- shape -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["[]", '[{"note": "x"}]', '"note"', "42", "4.2", "null", "true", "false"],
)
async def test_json_that_is_not_an_object_is_refused(
    refuse: Refuse,
    text: str,
) -> None:
    await refuse(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"note": "x"} and then some',
        '{"note": "x"}{"note": "y"}',
        '{"note": "x"}\x00',
        '{"note": "x"',
        '{"note": "x",}',
        "{'note': 'x'}",
        '\ufeff{"note": "x"}',
    ],
    ids=["words", "second-object", "nul", "truncated", "trailing-comma", "quotes", "bom"],
)
async def test_malformed_json_text_is_refused(
    refuse: Refuse,
    text: str,
) -> None:
    await refuse(text)


@pytest.mark.parametrize("arguments", [None, "", "   \n\t ", b"", b"  "])
async def test_absent_or_blank_arguments_are_an_empty_object(
    accept: Accept,
    arguments: object,
) -> None:
    assert await accept(arguments) == {"note": "", "count": 0}


async def test_blank_arguments_for_a_tool_with_required_fields_are_a_schema_refusal(
    gate: Gate,
    principal: Principal,
    wire: WireCheck,
) -> None:
    call = ToolCall(id="c", name="shop.search", arguments="")
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(envelope.field_errors) == {"$.query"}
    wire(envelope, call)


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque secret=hunter2>"


@pytest.mark.parametrize(
    "value",
    [
        {"a", "b"},
        frozenset({1}),
        b"bytes",
        bytearray(b"x"),
        _Opaque(),
        Decimal("1.5"),
        datetime(2026, 1, 1, tzinfo=UTC),
        1 + 2j,
        range(3),
    ],
    ids=lambda value: type(value).__name__,
)
async def test_python_objects_that_are_not_json_inside_decoded_arguments_are_refused(
    refuse: Refuse,
    value: object,
) -> None:
    shown = await refuse({"note": "x", "more": value})
    assert "hunter2" not in str(shown)


@pytest.mark.parametrize(
    "arguments",
    [42, 4.2, True, ["note"], ("note", "x"), {"note"}, _Opaque(), iter([("note", "x")])],
    ids=["int", "float", "bool", "list", "tuple", "set", "object", "iterator"],
)
async def test_arguments_of_an_unsupported_python_type_are_refused(
    refuse: Refuse,
    arguments: object,
) -> None:
    shown = await refuse(arguments)
    assert "hunter2" not in str(shown)


async def test_refused_arguments_leave_the_registry_as_it_was(
    refuse: Refuse,
    registry: Registry,
) -> None:
    before = registry.specs()
    for index, attack in enumerate(['{"a": 1, "a": 2}', '{"count": NaN}', b"\xff", "[]"]):
        await refuse(attack, call_id=f"attack-{index}")
    assert registry.specs() == before
