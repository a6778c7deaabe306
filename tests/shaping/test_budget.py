"""Budgets: results cut to size, still valid JSON of the same shape, every cut reported."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.envelope import Omission
from handrail.errors import ConfigurationError
from handrail.shaping.budget import (
    Budget,
    HeuristicTokens,
    child_path,
    fit,
    json_size,
    json_text,
)

TOKENS = HeuristicTokens()

json_leaf = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=300)
json_value = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=12)
        | st.dictionaries(st.text(max_size=12), children, max_size=8)
    ),
    max_leaves=60,
)


def _same_shape(original: Any, cut: Any) -> bool:
    """`cut` keeps the shape of `original`: prefixes of lists and strings, subsets of keys."""
    if isinstance(original, str):
        return isinstance(cut, str) and original.startswith(cut)
    if isinstance(original, list):
        return (
            isinstance(cut, list)
            and len(cut) <= len(original)
            and all(_same_shape(o, c) for o, c in zip(original, cut, strict=False))
        )
    if isinstance(original, dict):
        return (
            isinstance(cut, dict)
            and set(cut) <= set(original)
            and list(cut) == [k for k in original if k in cut]
            and all(_same_shape(original[k], cut[k]) for k in cut)
        )
    return bool(original == cut)


@settings(max_examples=300, deadline=None)
@given(value=json_value, limit=st.integers(40, 2000))
def test_a_fitted_value_is_valid_json_of_the_same_shape_within_budget(
    value: Any,
    limit: int,
) -> None:
    fitted, omissions = fit(value, Budget(max_chars=limit), TOKENS)
    assert json.loads(json_text(fitted)) == fitted
    assert _same_shape(value, fitted)
    if json_size(value) <= limit:
        assert fitted is value
        assert omissions == ()
    else:
        assert omissions, "a cut value reports what it left out"
        # Lone scalars other than strings cannot be cut; everything else fits.
        assert json_size(fitted) <= limit or not isinstance(value, list | dict | str)
    for omission in omissions:
        assert omission.kept < omission.total


@settings(max_examples=100, deadline=None)
@given(items=st.lists(st.text(max_size=40), min_size=1, max_size=200))
def test_a_cut_list_reports_its_real_total(items: list[str]) -> None:
    fitted, omissions = fit(items, Budget(max_chars=120), TOKENS)
    if json_size(items) > 120:
        top = [o for o in omissions if o.path == "$"]
        assert top == [Omission(path="$", unit="items", kept=len(fitted), total=len(items))]


def test_a_string_is_cut_on_a_character_boundary_and_the_cut_is_counted() -> None:
    text = "日本語🙂" * 100
    fitted, omissions = fit({"body": text}, Budget(max_chars=60), TOKENS)
    body = fitted["body"]
    assert text.startswith(body)
    assert body.encode("utf-8")  # no lone surrogate: encodes cleanly
    assert omissions == (Omission(path="$.body", unit="chars", kept=len(body), total=len(text)),)


def test_escapes_count_toward_the_size() -> None:
    text = '"' * 100  # each quote is two characters of JSON
    fitted, _ = fit(text, Budget(max_chars=52), TOKENS)
    assert json_size(fitted) <= 52
    assert len(fitted) == 25


def test_small_members_are_kept_whole_and_large_ones_share_the_rest() -> None:
    value = {"id": 7, "title": "short", "body": "x" * 5000, "notes": "y" * 5000}
    fitted, omissions = fit(value, Budget(max_chars=400), TOKENS)
    assert fitted["id"] == 7
    assert fitted["title"] == "short"
    assert 0 < len(fitted["body"]) < 5000
    assert 0 < len(fitted["notes"]) < 5000
    assert abs(len(fitted["body"]) - len(fitted["notes"])) <= 2
    assert {o.path for o in omissions} == {"$.body", "$.notes"}
    assert json_size(fitted) <= 400


def test_members_that_cannot_fit_even_their_key_are_left_out_and_counted() -> None:
    value = {f"key_number_{i}": i for i in range(100)}
    fitted, omissions = fit(value, Budget(max_chars=120), TOKENS)
    assert json_size(fitted) <= 120
    assert list(fitted) == [f"key_number_{i}" for i in range(len(fitted))]
    assert omissions[-1] == Omission(path="$", unit="fields", kept=len(fitted), total=100)


def test_a_first_item_larger_than_the_budget_is_cut_rather_than_dropped() -> None:
    fitted, omissions = fit(["z" * 1000, "a"], Budget(max_chars=100), TOKENS)
    assert len(fitted) == 1
    assert fitted[0] == "z" * len(fitted[0])
    assert {o.path for o in omissions} == {"$", "$[0]"}


def test_a_token_budget_is_kept_for_text_dense_in_tokens() -> None:
    text = "漢" * 3000  # one token per character by the heuristic
    budget = Budget(max_chars=100_000, max_tokens=500)
    fitted, _ = fit([text, text], budget, TOKENS)
    assert TOKENS.count(json_text(fitted)) <= 500


def test_odd_keys_get_bracketed_paths() -> None:
    assert child_path("$", "a b") == '$["a b"]'
    assert child_path("$", "ok_1") == "$.ok_1"
    assert child_path("$.x", 3) == "$.x[3]"
    assert child_path("$", "ключ") == '$["ключ"]'


def test_heuristic_tokens_count_ascii_by_four_and_other_characters_one_each() -> None:
    assert TOKENS.count("") == 0
    assert TOKENS.count("abcd" * 10) == 10
    assert TOKENS.count("abcd漢字") == 3
    with pytest.raises(ConfigurationError):
        HeuristicTokens(ascii_chars_per_token=0)


def test_budgets_only_narrow() -> None:
    base = Budget(max_chars=1000, max_tokens=None)
    assert base.narrowed(None, None) == base
    assert base.narrowed(2000, 50) == Budget(max_chars=1000, max_tokens=50)
    assert Budget(max_chars=10, max_tokens=40).narrowed(None, 80).max_tokens == 40
    with pytest.raises(ConfigurationError):
        Budget(max_chars=0)
