"""The argument matcher's rules, one by one, and the one-to-one pairing search."""

from __future__ import annotations

import pytest

from handrail.eval._bfcl_data import ExpectedCall
from handrail.eval._bfcl_match import best_pairing, match_call, matches, standardize


def test_strings_compare_without_case_spaces_and_listed_punctuation() -> None:
    assert standardize(" San-Francisco, CA. ") == "sanfranciscoca"
    assert matches("new_york", "New York")
    assert matches("It's", 'it"s')
    assert not matches("Boston", "New York")
    assert not matches("5", 5)


@pytest.mark.parametrize(
    ("value", "acceptable", "expected"),
    [
        (10, 10.0, True),
        (0.5, 0.5, True),
        (True, 1, False),
        (1, True, False),
        (False, False, True),
        (None, None, True),
        (0, None, False),
    ],
)
def test_numbers_compare_by_value_and_booleans_only_with_booleans(
    value: object, acceptable: object, expected: object
) -> None:
    assert matches(value, acceptable) is expected


def test_lists_match_element_by_element_in_order() -> None:
    assert matches(["Apple", "msft"], ["apple", "MSFT"])
    assert not matches(["MSFT", "Apple"], ["apple", "MSFT"])
    assert not matches(["apple"], ["apple", "MSFT"])
    assert matches([[10, 20], [30, 40]], [[10, 20], [30, 40]])


def test_a_dict_pattern_lists_acceptable_values_per_key_and_may_omit_some() -> None:
    pattern = {"limit": [50], "schema": ["public", ""], "format": "epoch"}
    assert matches({"limit": 50, "schema": "PUBLIC", "format": "epoch"}, pattern)
    assert matches({"limit": 50, "format": "epoch"}, pattern)
    assert not matches({"schema": "public", "format": "epoch"}, pattern)  # limit missing
    assert not matches({"limit": 50, "format": "epoch", "extra": 1}, pattern)
    assert not matches("limit=50", pattern)
    assert matches([{"item": "burgers", "quantity": 5}], [{"item": ["burgers"], "quantity": [5]}])


def test_a_call_counts_matched_fields_and_says_what_is_wrong() -> None:
    expected = ExpectedCall(function="f", params={"a": (1,), "b": ("x", ""), "c": ("up", "down")})
    assert match_call({"a": 1, "c": "Down"}, expected).accepted
    wrong = match_call({"a": 2, "c": "left", "d": 0}, expected)
    assert (wrong.matched, wrong.total) == (1, 3)
    assert wrong.reason == (
        "f: unexpected parameter 'd'; a=2 is not among 1; c='left' is not among 'up', 'down'"
    )
    missing = match_call({"b": "x", "c": "up"}, expected)
    assert missing.reason == "f: parameter 'a' is missing"
    assert missing.matched == 2


def test_an_empty_string_given_is_matched_as_a_value() -> None:
    expected = ExpectedCall(function="f", params={"b": ("x", "")})
    assert match_call({"b": ""}, expected).accepted


@pytest.mark.parametrize(
    ("weights", "slots", "best"),
    [
        ([], 2, 0),
        ([[3, 0]], 2, 3),
        # greedy would give the first call its best slot (3) and leave 0 for the second
        ([[3, 2], [3, 0]], 2, 5),
        ([[1, 1], [1, 1], [1, 1]], 2, 2),  # a third call has no slot left
        ([[0, 0], [0, 4]], 2, 4),
    ],
)
def test_the_pairing_is_the_best_one_to_one_not_the_greedy_one(
    weights: list[list[int]], slots: int, best: int
) -> None:
    assert best_pairing(weights, slots) == best


def test_a_value_of_no_json_kind_matches_nothing() -> None:
    assert not matches(1, object())
