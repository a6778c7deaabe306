"""The audit log's arguments summary is short, readable, and never holds a credential.

`summarize_arguments` keeps the audit log from becoming a copy of the input: it is at
most 512 characters, JSON unless it had to be cut (then it ends in "…"), and the value
under any key that names a password, token or secret is replaced, whatever its case.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.record.audit import summarize_arguments

LIMIT = 512
KEY_CLIP = 48
MARKER = "ZQX"  # secret values carry it; nothing else can (plain text has no "Z")

PLAIN_TEXT = st.text(alphabet=st.characters(exclude_characters="Z", codec="utf-8"), max_size=60)
PLAIN_KEYS = st.text(alphabet=st.characters(exclude_characters="Z", codec="utf-8"), max_size=12)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | PLAIN_TEXT
)


def _random_case(word: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flip else c for c, flip in zip(word, flips, strict=False))


SENSITIVE_WORDS = st.sampled_from(["password", "token", "secret", "passwd", "api_key", "apikey"])
SENSITIVE_KEYS = st.builds(
    lambda prefix, word, flips, suffix: prefix + _random_case(word, flips) + suffix,
    st.text(alphabet="abcdefghij_-.", max_size=15),
    SENSITIVE_WORDS,
    st.lists(st.booleans(), min_size=8, max_size=8),
    st.text(alphabet="abcdefghij_-.", max_size=15),
)
SECRET_VALUES = st.builds(
    lambda body: f"{MARKER}{body}{MARKER}",
    st.text(alphabet="0123456789abcdef", max_size=80),
)
SECRET_HOLDERS = (
    SECRET_VALUES
    | st.lists(SECRET_VALUES, min_size=1, max_size=3)
    | st.dictionaries(PLAIN_KEYS, SECRET_VALUES, min_size=1, max_size=3)
)


def _with_secrets(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    plain = st.dictionaries(PLAIN_KEYS, children, max_size=5)
    secret = st.dictionaries(SENSITIVE_KEYS, SECRET_HOLDERS, min_size=1, max_size=3)
    return (
        st.lists(children, max_size=12)
        | plain
        | st.builds(lambda a, b: {**a, **b}, plain, secret)
        | st.builds(lambda a, b: {**b, **a}, plain, secret)
    )


ARGUMENTS = st.recursive(SCALARS, _with_secrets, max_leaves=20)


def _check_shape(summary: str) -> None:
    assert len(summary) <= LIMIT
    if summary.endswith("…"):
        assert len(summary) == LIMIT
    else:
        json.loads(summary)


@settings(max_examples=200)
@given(arguments=ARGUMENTS)
def test_the_summary_is_bounded_json_or_visibly_cut(arguments: object) -> None:
    _check_shape(summarize_arguments(arguments))


@settings(max_examples=200)
@given(arguments=ARGUMENTS)
def test_the_summary_never_holds_the_value_of_a_credential_key(arguments: object) -> None:
    assert MARKER not in summarize_arguments(arguments)


@settings(max_examples=200)
@given(
    key=SENSITIVE_KEYS,
    secret=SECRET_VALUES,
    padding=st.integers(min_value=0, max_value=KEY_CLIP + 20),
)
def test_a_credential_key_is_redacted_however_long_its_name(
    key: str,
    secret: str,
    padding: int,
) -> None:
    # A real parameter name can be long ("customer_database_connection_password");
    # its value must be redacted even when the word comes after the 48th character.
    summary = summarize_arguments({"a" * padding + key: secret, "query": "books"})
    assert MARKER not in summary
    _check_shape(summary)


def test_a_long_credential_key_name_is_redacted() -> None:
    summary = summarize_arguments(
        {"customer_database_connection_string_with_password": "hunter2"},
    )
    assert "hunter2" not in summary
