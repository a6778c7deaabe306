"""Unicode and storable text: the checks and the escape the audit store relies on."""

from __future__ import annotations

import pytest

from handrail.text import escape_unstorable, is_storable, is_unicode


@pytest.mark.parametrize(
    "text",
    ["", "call_123", "\u547c\u3073\U0001f600", "nul\x00inside", "\x7f\x1b[31m"],
)
def test_text_without_lone_surrogates_is_unicode(text: str) -> None:
    assert is_unicode(text)
    text.encode("utf-8")


@pytest.mark.parametrize("text", ["\ud800", "call_\udfff", "\u00e9\udc80", "\ud83d\ude00"])
def test_a_lone_surrogate_is_not_unicode_text(text: str) -> None:
    assert not is_unicode(text)
    assert not is_storable(text)


def test_nul_is_unicode_but_not_storable() -> None:
    assert is_unicode("a\x00b")
    assert not is_storable("a\x00b")
    assert is_storable("a\u00e9b\U0001f600")


def test_the_escape_writes_each_unstorable_character_as_a_unicode_escape() -> None:
    escaped = escape_unstorable("id\ud800\x00\u00e9\ud83d\ude00")
    assert escaped == "id\\ud800\\u0000\u00e9\\ud83d\\ude00"
    escaped.encode("utf-8")
    assert is_storable(escaped)


def test_storable_text_is_returned_unchanged() -> None:
    text = "call_\u00e9\\ud800"
    assert escape_unstorable(text) is text
