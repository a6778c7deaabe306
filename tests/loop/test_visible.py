"""What of a streamed reply a person is shown: prose as written, a JSON answer's message."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from handrail.loop._visible import VisibleText


def _shown(text: str, cuts: list[int]) -> tuple[list[str], str]:
    """The pieces shown while `text` arrives cut at `cuts`, and what `finish` adds."""
    visible = VisibleText()
    pieces: list[str] = []
    start = 0
    for cut in [*sorted({c for c in cuts if 0 < c < len(text)}), len(text)]:
        pieces.append(visible.feed(text[start:cut]))
        start = cut
    return pieces, visible.finish(text)


def _answer(message: str, **more: object) -> str:
    return json.dumps({"state": "need_information", "message": message, **more})


_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=60)
_CUTS = st.lists(st.integers(min_value=0, max_value=400), max_size=12)


@given(_TEXT.filter(lambda t: not t.lstrip().startswith(("{", "`"))), _CUTS)
def test_prose_is_shown_exactly_as_written_however_it_is_cut(text: str, cuts: list[int]) -> None:
    pieces, rest = _shown(text, cuts)
    assert "".join(pieces) + rest == text


@given(_TEXT, _CUTS, st.booleans())
def test_a_structured_answer_shows_its_message_and_no_json(
    message: str, cuts: list[int], fenced: bool
) -> None:
    text = _answer(message, evidence=[{"tool": "t", "plan_id": "p1"}])
    if fenced:
        text = f"```json\n{text}\n```"
    pieces, rest = _shown(text, cuts)
    assert "".join(pieces) + rest == message
    assert all(not piece or message.find(piece) >= 0 for piece in pieces)


def test_the_message_grows_as_it_arrives_and_nothing_before_it_is_shown() -> None:
    visible = VisibleText()
    assert visible.feed('  {"state": "succeeded", ') == ""
    assert visible.feed('"message": "Ada\'s email ') == "Ada's email "
    assert visible.feed("is now ada@new.") == "is now ada@new."
    assert visible.feed('example", "evidence": [') == "example"
    assert visible.finish('  {"state": "succeeded", "message": "x"}') == ""


def test_an_escape_cut_in_half_is_shown_once_complete() -> None:
    visible = VisibleText()
    assert visible.feed('{"message": "caf') == "caf"
    assert visible.feed("\\u00") == ""
    assert visible.feed('e9 ok"}') == "\u00e9 ok"


def test_a_fence_that_is_not_json_turns_out_to_be_prose() -> None:
    visible = VisibleText()
    assert visible.feed("``") == ""
    assert visible.feed("`python\nprint(1)") == "```python\nprint(1)"


def test_text_that_starts_like_json_but_is_not_shows_nothing_until_the_answer() -> None:
    visible = VisibleText()
    assert visible.feed("{not json at all") == ""
    assert visible.finish("{not json at all") == ""


def test_only_whitespace_so_far_is_held_and_shown_at_the_end() -> None:
    visible = VisibleText()
    assert visible.feed("  ") == ""
    assert visible.finish("  ") == "  "
