"""Screens in front of the detectors: a text a screen turns away holds nothing they find.

A screen only skips work, so the findings must be the same with it as without it; these
tests check the provider screen against every provider pattern and against texts made
to look like keys, and that the number and keyword screens pass whatever their anchors
would find (the anchored scans are checked against full scans in test_redact_detectors).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from handrail.shaping import (
    _detect_credentials,
    _detect_entropy,
    _detect_personal,
    _detectors,
    _provider_gates,
    _views,
)
from handrail.shaping._detectors import Detectors

PATTERNS = [
    (plugin.__name__, index, pattern)
    for plugin in _provider_gates.PROVIDER_PLUGINS
    for index, pattern in enumerate(plugin().denylist)
]


class _Open:
    """A screen that lets every text through: the Detectors as they were without one."""

    def may_hold(self, text: str, views: _views.Views, longest: int) -> bool:
        return True


def _provider_findings(detectors: Detectors, text: str) -> list[tuple[int, int, str]]:
    views = _views.Views.of(text)
    runs = _detect_entropy.high_entropy(text, views, [], hex_tokens=False)
    found: list[_detectors.Candidate] = []
    detectors._provider_keys(text, views, runs, found)
    return [(start, end, str(kind)) for _, start, end, kind in found]


def _may_hold(detectors: Detectors, text: str) -> bool:
    views = _views.Views.of(text)
    runs = _detect_entropy.high_entropy(text, views, [], hex_tokens=False)
    longest = max((end - start for start, end in runs), default=0)
    return detectors._screen.may_hold(text, views, longest)


@pytest.fixture(scope="module")
def screened() -> Detectors:
    return Detectors()


@pytest.fixture(scope="module")
def unscreened() -> Detectors:
    detectors = Detectors()
    detectors._screen = _Open()  # type: ignore[assignment]  # a stand-in with its method
    return detectors


@pytest.mark.parametrize(
    ("plugin", "index", "pattern"), PATTERNS, ids=[f"{p}-{i}" for p, i, _ in PATTERNS]
)
def test_every_match_of_every_provider_pattern_passes_the_screen(
    screened: Detectors, plugin: str, index: int, pattern: re.Pattern[str]
) -> None:
    @settings(max_examples=40, suppress_health_check=list(HealthCheck), deadline=None)
    @given(
        before=st.text(max_size=20),
        match=st.from_regex(pattern, fullmatch=True),
        after=st.text(max_size=20),
    )
    def passes(before: str, match: str, after: str) -> None:
        text = before + match + after
        if pattern.search(text) is not None:
            assert _may_hold(screened, text)

    passes()


_KEYISH = st.text(
    alphabet=st.sampled_from(
        "AKIAghp_sk-SG.xoxb-glpatpypi-AgEIcHlwaS5vcmcAC0123456789abcdefT3BlbkFJ:/=\"' \n.-_"
    ),
    max_size=_detectors._SCREENED,
)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=_detectors._SCREENED) | _KEYISH)
@example('{"x": 12345}')
@example("sid AC" + "0123456789abcdef" * 2 + " ok")
@example("bot 110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawx ok")
def test_the_screen_changes_no_finding(
    screened: Detectors, unscreened: Detectors, text: str
) -> None:
    assert _provider_findings(screened, text) == _provider_findings(unscreened, text)


@pytest.mark.parametrize(
    "text",
    ['{"x": 12345}', '{"query": "orders from last week", "limit": 10}', "ok", '{"ok": true}'],
)
def test_ordinary_short_texts_are_not_searched_pattern_by_pattern(
    screened: Detectors, text: str
) -> None:
    assert not _may_hold(screened, text)


def test_patterns_with_different_flags_are_not_joined() -> None:
    with pytest.raises(ValueError, match="differ in their flags"):
        _detectors._joined([re.compile("a"), re.compile("b", re.IGNORECASE)])


def test_every_number_anchor_holds_the_run_that_screens_them() -> None:
    shared = _detect_personal._SHARED_BY_NUMBER_ANCHORS
    assert all(shared in anchor for anchor in _detect_personal._NUMBER_ANCHORS)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("pastwdecrokniuhlvPASTWD_-:= \"'xyz01"), max_size=80))
def test_the_keyword_screen_lets_through_every_text_holding_a_keyword_start(text: str) -> None:
    low = _views.Views.of(text).low
    holds = any(start in low for start in _detect_credentials._KEYWORD_STARTS)
    assert (_detect_credentials._ANY_KEYWORD_START.search(low) is not None) == holds
