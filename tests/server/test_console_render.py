"""The console's rendering helpers: money as currency, and `next` kept on the site."""

from __future__ import annotations

import pytest

from handrail.plans import Amount
from handrail.server.console._render import _environment, local_path


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (Amount(123_456, "EUR"), "1,234.56 EUR"),
        (Amount(5, "USD"), "0.05 USD"),
        (Amount(1500, "JPY", 0), "1,500 JPY"),
        (Amount(1_000, "KWD", 3), "1.000 KWD"),
        (Amount(-250, "EUR"), "-2.50 EUR"),
    ],
)
def test_minor_units_are_shown_in_the_currencys_own_decimals(amount, shown):
    assert _environment().filters["money"](amount) == shown


def test_the_plan_page_shows_money_in_currency_and_minor_units():
    html = (
        _environment()
        .from_string("{{ a|money }} ({{ a.minor_units }})")
        .render(a=Amount(100_000_001, "EUR"))
    )
    assert html == "1,000,000.01 EUR (100000001)"


@pytest.mark.parametrize(
    ("candidate", "kept"),
    [
        ("/plans/abc?x=1", "/plans/abc?x=1"),
        ("/audit", "/audit"),
        (None, "/plans"),
        ("", "/plans"),
        ("plans", "/plans"),
        ("//evil.example", "/plans"),
        ("/\\evil.example", "/plans"),
        ("https://evil.example", "/plans"),
        ("/plans\x00", "/plans"),
        ("/" + "a" * 3000, "/plans"),
    ],
)
def test_only_a_local_path_is_kept_as_next(candidate, kept):
    assert local_path(candidate) == kept
