from __future__ import annotations

import pytest

from handrail.skills._front_matter import FrontMatterError, parse_skill_md


def test_keys_values_and_their_lines_are_read_and_the_body_follows() -> None:
    front = parse_skill_md(
        "---\nname: pdf\ndescription: Fill forms.\nallowed-tools:\n  - a.b\n  - c.d\n---\n"
        "# Body\nline two\n",
    )
    assert dict(front.values) == {
        "name": "pdf",
        "description": "Fill forms.",
        "allowed-tools": ["a.b", "c.d"],
    }
    assert dict(front.lines) == {"name": 2, "description": 3, "allowed-tools": 4}
    assert dict(front.item_lines) == {"allowed-tools": (5, 6)}
    assert front.body == "# Body\nline two\n"
    assert front.body_line == 8


def test_a_fence_with_trailing_spaces_and_crlf_still_counts() -> None:
    front = parse_skill_md("--- \r\nname: x\r\n---\r\nbody\r\n")
    assert front.values["name"] == "x"
    assert front.body_line == 4


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("name: x\n---\n", 1, "must start with a '---'"),
        ("", 1, "must start with a '---'"),
        ("---\nname: x\n", 1, "never closed"),
        ("---\n- a\n- b\n---\n", 2, "must be a mapping"),
        ("---\n---\nbody\n", 1, "must be a mapping"),
        ("---\nname: x\nname: y\n---\n", 3, "appears twice"),
        ("---\n[a]: 1\n---\n", 2, "plain text"),
        ("---\n1: one\n---\n", 2, "plain text"),
        ("---\nname: x\ndescription: a\u2028b: c\n---\n", 3, "line separator"),
        ("---\nname: x\n  bad: indent\n---\n", 3, "not valid YAML"),
        ("---\ndescription: 'unterminated\n---\n", 2, "not valid YAML"),
        ("---\nx: !!python/object/apply:os.system ['id']\n---\n", 2, "constructor"),
    ],
)
def test_what_cannot_be_read_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(FrontMatterError) as caught:
        parse_skill_md(text)
    assert caught.value.line == line
    assert words in caught.value.message


def test_a_second_fence_is_part_of_the_body_not_a_second_document() -> None:
    assert parse_skill_md("---\na: 1\n---\nb: 2\n---\n").body == "b: 2\n---\n"


def test_anchors_and_aliases_are_refused_at_the_first_anchor() -> None:
    with pytest.raises(FrontMatterError) as caught:
        parse_skill_md("---\nname: x\nmetadata: &m {a: b}\nother: *m\n---\n")
    assert caught.value.line == 3
    assert "anchors and aliases" in caught.value.message


def test_nesting_deeper_than_eight_levels_is_refused() -> None:
    parse_skill_md("---\nmetadata: " + "[" * 7 + "]" * 7 + "\n---\n")
    with pytest.raises(FrontMatterError) as caught:
        parse_skill_md("---\nmetadata: " + "[" * 9 + "]" * 9 + "\n---\n")
    assert "deeper than 8" in caught.value.message
