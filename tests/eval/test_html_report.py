"""The HTML report: parsed, it references nothing outside itself; in Chromium, it loads nothing.

The parse test reads the page with the standard library's HTML parser: every element
closed, no script, no URL in any attribute but a fragment or `data:`, no `url(` in
the CSS, a Content-Security-Policy, and one chart per metric and per tool. The
browser test opens the page in Debian's /usr/bin/chromium through Playwright, with
every request aborted and counted (a control page proves the counter counts), and
checks that the charts are drawn. Without chromium it skips, except under CI=true.
"""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser

import pytest

from _chromium import launched_chromium
from _hand_reports import report, two_scenarios
from handrail.eval.html import render_html
from handrail.eval.report import Metric

_VOID = frozenset({"meta", "link", "br", "img", "input", "hr", "col", "source", "wbr"})
_SVG_LEAVES = frozenset({"rect", "line", "path", "circle"})
_URL_ATTRIBUTES = frozenset(
    {"src", "href", "xlink:href", "action", "formaction", "srcset", "poster", "data", "background"}
)


class _Page(HTMLParser):
    """Elements with their attributes and the text, checking that every element closes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.open: list[str] = []
        self.text: list[str] = []
        self.style = ""
        self.doctype = ""

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        if tag not in _VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.open, f"</{tag}> closes nothing"
        assert self.open[-1] == tag, f"</{tag}> closes <{self.open[-1]}>"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        if self.open and self.open[-1] == "style":
            self.style += data
        else:
            self.text.append(data)

    def having(self, tag: str, **attributes: str) -> list[dict[str, str]]:
        return [
            attrs
            for name, attrs in self.elements
            if name == tag
            and all(attrs.get(k.replace("_", "-")) == v for k, v in attributes.items())
        ]


def _parsed(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    assert page.open == []
    return page


def test_the_page_parses_and_references_nothing_outside_itself() -> None:
    page = _parsed(render_html(two_scenarios()))
    assert page.doctype == "DOCTYPE html"
    tags = {tag for tag, _ in page.elements}
    assert not tags & {"script", "iframe", "object", "embed", "img", "base", "form", "video"}
    for tag, attrs in page.elements:
        for name, value in attrs.items():
            if name in _URL_ATTRIBUTES:
                assert value.startswith(("#", "data:")), f"<{tag} {name}={value!r}>"
            assert not name.startswith("on"), f"<{tag}> has an event handler"
    assert [attrs["rel"] for attrs in page.having("link")] == ["icon"]
    assert "url(" not in page.style
    assert "@import" not in page.style
    [policy] = page.having("meta", http_equiv="Content-Security-Policy")
    assert policy["content"].startswith("default-src 'none';")


def test_each_metric_has_a_bar_per_scenario_that_measured_it() -> None:
    html = render_html(two_scenarios())
    page = _parsed(html)
    figures = [attrs["data-metric"] for attrs in page.having("figure", **{"class": "metric"})]
    assert figures == [
        "success_rate",
        "unknown_rate",
        "duplicate_side_effects",
        "recovery_seconds_mean",
        "tool_latency_p95_ms",
    ]
    bars = [attrs for attrs in page.having("rect") if attrs["class"].startswith("bar ")]
    assert len(bars) == 2 + 1 + 2 + 1 + 1
    # a rate is drawn on 0..100%: 75% of the 360-unit track; the larger count fills it
    widths = [float(b["width"]) for b in bars]
    assert widths[:3] == [270.0, 180.0, 180.0]
    assert widths[3:5] == [0.0, 360.0]
    assert {b["class"] for b in bars} == {"bar higher", "bar lower"}


def test_each_tool_has_a_latency_histogram_with_its_percentiles() -> None:
    page = _parsed(render_html(two_scenarios()))
    tools = [attrs["data-tool"] for attrs in page.having("figure", **{"class": "latency"})]
    assert tools == ["shop.order", "shop.search"]
    text = " ".join(page.text)
    # shop.order: 5 calls of one scenario and 60 of the other
    assert "65 call(s) · p50 8.0 ms · p95 16.8 ms · p99 21.7 ms · max 30.0 ms" in text
    assert "2 call(s) · p50 1.1 ms" in text
    marks = [attrs for attrs in page.having("line") if attrs["class"].startswith("mark ")]
    assert len(marks) == 3 * 2


def test_text_from_the_report_is_escaped_not_markup() -> None:
    html = render_html(two_scenarios())
    page = _parsed(html)
    assert not page.having("b")
    text = " ".join(page.text)
    assert "A duplicate submit <b>bold</b>" in text
    assert "a note with <angle> & ampersand" in text
    assert "the UNKNOWN write was never reconciled" in text


def test_a_report_without_latencies_or_scenarios_says_so() -> None:
    page = _parsed(render_html(report(totals=(Metric.amount("retries", 0),))))
    text = " ".join(page.text)
    assert "No tool latencies were recorded in this run." in text
    assert "No scenario measured anything." in text


# --- in a real browser ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with launched_chromium() as launched:
        yield launched


def _open(browser, html: str):
    """A new page showing `html`, every request it makes aborted and recorded."""
    page = browser.new_page()
    requested: list[str] = []
    errors: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.route("**/*", lambda route: route.abort())
    page.set_content(html, wait_until="load")
    return page, requested, errors


def test_in_chromium_the_page_makes_no_request_and_draws_its_charts(browser) -> None:
    page, requested, errors = _open(browser, render_html(two_scenarios()))
    try:
        assert requested == []
        assert errors == []
        assert page.title() == "Handrail evaluation: builtin · scripted"
        bars = page.locator("svg rect.bar")
        assert bars.count() == 7
        drawn = [bars.nth(i).bounding_box() for i in range(bars.count())]
        assert sum(1 for box in drawn if box is not None and box["width"] > 0) == 6
        assert page.locator("figure.latency svg rect.bin").count() > 0
        assert page.locator("figure.latency svg line.mark").count() == 6
        assert page.get_by_role("heading", name="Latency distribution per tool").is_visible()
    finally:
        page.close()


def test_the_request_counter_does_count_a_page_that_reaches_out(browser) -> None:
    html = render_html(two_scenarios()).replace(
        "</main>", '<img src="http://127.0.0.1:9/beacon.png" alt=""></main>'
    )
    page, requested, _ = _open(browser, html)
    try:
        assert requested == ["http://127.0.0.1:9/beacon.png"]
    finally:
        page.close()
