"""The deterministic helpers through a gate: exact, bounded, refusing what they cannot take."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail import Envelope, ErrorCode, Gate, Principal, Registry, RiskLevel, Status, ToolCall
from handrail.canonical import canonical_json
from handrail.envelope import Trust
from handrail.errors import ConfigurationError
from handrail.spec import SideEffect
from handrail.tools.helpers import helper_tools

pytestmark = pytest.mark.anyio

USER = Principal(user_id="u1", tenant_id="t1")


def _gate(**options: Any) -> Gate:
    registry = Registry()
    for made in helper_tools(**options):
        registry.register(made)
    return Gate(registry)


async def _call(name: str, arguments: dict[str, object], gate: Gate | None = None) -> Envelope:
    call = ToolCall(id="c1", name=f"util.{name}", arguments=json.dumps(arguments))
    return await (gate or _gate()).handle(call, USER)


async def _ok(name: str, arguments: dict[str, object]) -> dict[str, Any]:
    envelope = await _call(name, arguments)
    assert envelope.status is Status.OK, envelope.summary
    data: dict[str, Any] = envelope.data
    return data


TOOLS = {made.name.removeprefix("util."): made for made in helper_tools()}


def _direct(name: str, arguments: dict[str, object]) -> dict[str, Any]:
    """The tool's own result, before the gate shapes it (redaction would alter some text).

    For property tests, which hypothesis runs as plain functions.
    """
    made = TOOLS[name]
    assert not made.schema_errors(arguments)
    result: dict[str, Any] = asyncio.run(made.invoke(made.bind(arguments), None))  # type: ignore[arg-type]
    return result


def test_the_helpers_are_public_reads_without_side_effects() -> None:
    tools = helper_tools(namespace="calc")
    assert [t.name for t in tools] == ["calc.sha256_text", "calc.count_text", "calc.json_canonical"]
    for made in tools:
        assert made.spec.risk is RiskLevel.L0_PUBLIC_READ
        assert made.spec.side_effect is SideEffect.NONE
        assert made.spec.hints.read_only
    assert tools[0].spec.results.trust is Trust.INTERNAL
    # json_canonical echoes its input, which anyone may have written.
    assert tools[2].spec.results.trust is Trust.UNTRUSTED
    assert helper_tools(namespace=None)[0].name == "sha256_text"


@pytest.mark.parametrize("max_chars", [0, 1_000_001])
def test_an_input_bound_out_of_range_is_a_configuration_error(max_chars: int) -> None:
    with pytest.raises(ConfigurationError):
        helper_tools(max_chars=max_chars)


@pytest.mark.parametrize(
    ("text", "digest"),
    [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ],
)
async def test_sha256_text_matches_the_standard_test_vectors(text: str, digest: str) -> None:
    data = await _ok("sha256_text", {"text": text})
    assert data == {"sha256": digest, "bytes": len(text)}


async def test_sha256_text_hashes_the_utf8_bytes_of_the_text() -> None:
    text = "naïve 漢字 🚀\x00end"
    data = await _ok("sha256_text", {"text": text})
    assert data["sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert data["bytes"] == len(text.encode("utf-8")) == 22


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("", 0),
        ("one", 1),
        ("one\n", 1),
        ("\n", 1),
        ("one\ntwo", 2),
        ("one\r\ntwo\r\n", 2),
        ("one\rtwo", 2),
        ("one\n\n", 2),
        ("a\r\n\rb", 3),
    ],
)
async def test_count_text_counts_lines_as_an_editor_shows_them(text: str, lines: int) -> None:
    data = await _ok("count_text", {"text": text})
    assert data["lines"] == lines


async def test_count_text_counts_code_points_bytes_and_words() -> None:
    data = await _ok("count_text", {"text": "héllo  wörld\t🚀\n"})
    assert data == {"chars": 15, "bytes": 20, "lines": 1, "words": 3}


@given(
    st.text(
        alphabet=st.characters(
            codec="utf-8", exclude_characters="\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
        )
    )
)
def test_count_text_agrees_with_python_for_any_text(text: str) -> None:
    data = _direct("count_text", {"text": text})
    assert data["chars"] == len(text)
    assert data["bytes"] == len(text.encode("utf-8"))
    assert data["lines"] == len(text.splitlines())
    assert data["words"] == len(text.split())


async def test_json_canonical_sorts_keys_and_normalises_numbers() -> None:
    data = await _ok(
        "json_canonical",
        {"json_text": '{"b": [1.0, 1e2, -0, "\\u00e9"], "a": {"z": true, "y": null}}'},
    )
    assert data["canonical"] == '{"a":{"y":null,"z":true},"b":[1,100,0,"é"]}'
    assert data["bytes"] == len(data["canonical"].encode("utf-8"))
    assert data["sha256"] == hashlib.sha256(data["canonical"].encode("utf-8")).hexdigest()


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("9007199254740991", "9007199254740991"),
        ("9007199254740992", "9007199254740992"),
        ("21915272379220590", "21915272379220590"),
        ("1000000000000000000000", "1e+21"),
    ],
)
async def test_json_canonical_reads_numbers_as_doubles_like_rfc_8785(
    text: str, canonical: str
) -> None:
    # Numbers are doubles: 2**53 is one, so RFC 8785 can write it; 2**53 + 1 is not.
    assert (await _ok("json_canonical", {"json_text": text}))["canonical"] == canonical


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(alphabet=st.characters(codec="utf-8"), max_size=8), children, max_size=4
        )
    ),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_json_canonical_is_stable_and_equal_content_gives_equal_text(value: object) -> None:
    spaced = json.dumps(value, indent=2, ensure_ascii=True)
    data = _direct("json_canonical", {"json_text": spaced})
    assert data["canonical"] == canonical_json(value).decode("utf-8")
    again = _direct("json_canonical", {"json_text": data["canonical"]})
    assert again == data


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"a": 1, "a": 2}',
        '{"x": {"k": [], "k": {}}}',
        "NaN",
        "[Infinity]",
        "[-Infinity]",
        "1" * 5000,
        "9007199254740993",
        "-9007199254740993",
        "1e400",
        "1" + "0" * 400,
        '"\\ud800"',
        "[" * 100 + "]" * 100,
        "[" * 5000 + "]" * 5000,
    ],
)
async def test_json_canonical_refuses_what_it_cannot_represent_exactly(text: str) -> None:
    envelope = await _call("json_canonical", {"json_text": text})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.retryable
    assert len(envelope.summary) < 200  # says what is wrong; never echoes the input


@pytest.mark.parametrize("name", ["sha256_text", "count_text"])
async def test_text_beyond_the_bound_is_refused_by_the_schema(name: str) -> None:
    gate = _gate(max_chars=10)
    assert (await _call(name, {"text": "x" * 10}, gate)).status is Status.OK
    envelope = await _call(name, {"text": "x" * 11}, gate)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "$.text" in envelope.field_errors


@pytest.mark.parametrize(
    "arguments",
    [{"text": 5}, {"text": ["a"]}, {"text": {"a": 1}}, {}, {"text": "a", "extra": 1}],
)
async def test_arguments_of_the_wrong_shape_are_refused(arguments: dict[str, object]) -> None:
    envelope = await _call("sha256_text", arguments)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
