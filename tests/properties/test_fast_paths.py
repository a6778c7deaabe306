"""The audit's fast paths write exactly what the general paths write, byte for byte.

`canonical_json` takes a shortcut for plain JSON (no floats, built-in types, keys
that sort alike by code point and by UTF-16); `summarize_arguments` one for small
values. Each must equal the general path (rfc8785; `_summarize` and the encoder),
or fail the same way, for any value: the argument hash and summary in the audit log
must not depend on which path made them.
"""

from __future__ import annotations

from typing import Any

import rfc8785
from _json_strategies import json_scalars, json_values
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.canonical import _plain, canonical_json
from handrail.record import audit

# Text that reaches every case: ASCII, control characters, the BMP above U+E000, astral
# characters (whose UTF-16 order differs from their code point order), lone surrogates.
TEXT = st.text(
    alphabet=st.sampled_from(
        ["a", "b", "\x00", "\x1f", '"', "\\", "\x7f", "é", "\ue000", "\uffff", "\U0001f600"]
    )
    | st.characters(),
    max_size=12,
)
INTEGERS = st.integers(min_value=-(2**53) - 2, max_value=2**53 + 2) | st.integers()
SCALARS = (
    st.none()
    | st.booleans()
    | INTEGERS
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
    | st.text(max_size=70)
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=10)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(TEXT, children, max_size=10)
        | st.dictionaries(st.sampled_from(["password", "x", "Token", "a" * 50]), children)
        # Around the summary's limit of 8 members.
        | st.lists(children, min_size=7, max_size=10)
        | st.dictionaries(TEXT, children, min_size=7, max_size=10)
    ),
    max_leaves=24,
)


def _outcome(make: Any, value: object) -> object:
    try:
        return make(value)
    except Exception as exc:  # noqa: BLE001 - the kind of failure is what is compared
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_canonical_json_equals_rfc8785_for_any_value(value: object) -> None:
    assert _outcome(canonical_json, value) == _outcome(rfc8785.dumps, value)


@settings(max_examples=200, deadline=None)
@given(json_values(json_scalars(st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1))))
def test_canonical_json_equals_rfc8785_for_json_values(value: object) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def _general_summary(value: object) -> str:
    text = audit._SUMMARY_ENCODER.encode(audit._summarize(value, 0))
    return text if len(text) <= audit._SUMMARY_TOTAL else text[: audit._SUMMARY_TOTAL - 1] + "…"


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_the_summary_equals_the_general_path_for_any_value(value: object) -> None:
    assert _outcome(audit.summarize_arguments, value) == _outcome(_general_summary, value)


def test_the_fast_paths_are_taken_for_plain_values() -> None:
    # Not a timing check: only that the equality above covers the shortcut at all.
    assert audit._quick({"x": 7, "password": "p", "s": "t" * 60}, 0) is not None
    assert audit._quick({"x": 1.5}, 0) is None
    assert _plain({"b": [1, None, True], "a": "é"}) == '{"a":"é","b":[1,null,true]}'
    assert _plain({"x": 1.5}) is None
