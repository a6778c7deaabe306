"""Attacks on `handrail eval bfcl --answers` through the cassette it reads.

Bad JSON lines, a JSON bomb, bytes that are not UTF-8, arguments that are not text,
huge arguments, duplicate and unknown ids, a call naming a function the question does
not offer, an id carrying terminal escapes: each is one `error:` line (exit 2) or a
scored answer, never a traceback, and nothing of the model's text reaches the terminal raw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from handrail.cli import app
from handrail.eval.report import load_report

QUESTION = "simple_python_0"
ESC = "\x1b[2J\x1b]0;owned\x07"


def _invoke(cassette: Path, *args: str) -> Any:
    return CliRunner().invoke(
        app,
        ["eval", "bfcl", "--answers", str(cassette), "-c", "simple_python", "--limit", "1", *args],
        env={"COLUMNS": "200"},
    )


def _lines(path: Path, *lines: object) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (("{not json",), "a.jsonl:1: not JSON"),
        (("[" * 100_000,), "a.jsonl:1: not JSON (nested too deep)"),
        (('{"id": ' + "[" * 100_000,), "a.jsonl:1: not JSON"),
        (([1, 2],), "a.jsonl:1: not an object with an id"),
        (({"id": 5, "calls": []},), "a.jsonl:1: not an object with an id"),
        (({"id": QUESTION, "calls": {"name": "x"}},), "calls is not a list"),
        (({"id": QUESTION, "calls": ["x"]},), "a call is not an object with a name"),
        (({"id": QUESTION, "calls": [{"name": 7}]},), "a call is not an object with a name"),
        (
            ({"id": QUESTION, "calls": [{"name": "f", "arguments": [1]}]},),
            "arguments are neither JSON text nor an object",
        ),
        (
            ({"id": QUESTION, "calls": []}, {"id": QUESTION, "calls": []}),
            "a.jsonl:2: a second answer to simple_python_0",
        ),
    ],
)
def test_a_malformed_cassette_is_one_error_line(
    tmp_path: Path, lines: tuple[object, ...], message: str
) -> None:
    result = _invoke(_lines(tmp_path / "a.jsonl", *lines))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_a_cassette_that_is_not_utf8_is_one_error_line(tmp_path: Path) -> None:
    cassette = tmp_path / "a.jsonl"
    cassette.write_bytes(b"\xff\xfe{}\n")
    result = _invoke(cassette)
    assert result.exit_code == 2
    assert "a.jsonl: not UTF-8 text" in result.stderr


def test_a_duplicate_id_with_terminal_escapes_is_named_escaped(tmp_path: Path) -> None:
    evil = f"id{ESC}"
    cassette = _lines(tmp_path / "a.jsonl", {"id": evil, "calls": []}, {"id": evil, "calls": []})
    result = _invoke(cassette)
    assert result.exit_code == 2
    assert "\x1b" not in result.stderr
    assert "\x07" not in result.stderr
    assert "id\\x1b[2J" in result.stderr


@pytest.mark.parametrize(
    "call",
    [
        {"name": f"no_such_function{ESC}", "arguments": "{}"},
        {"name": "calculate_triangle_area", "arguments": "[" * 50_000},
        {"name": "calculate_triangle_area", "arguments": json.dumps({"base": "x" * 2_000_000})},
        {"name": "calculate_triangle_area", "arguments": "not json"},
        {"name": "calculate_triangle_area"},
    ],
    ids=["unknown-function", "bomb", "huge", "not-json", "no-arguments"],
)
def test_a_hostile_call_is_scored_wrong_not_a_crash(tmp_path: Path, call: dict[str, Any]) -> None:
    cassette = _lines(
        tmp_path / "a.jsonl",
        {"id": QUESTION, "calls": [call]},
        {"id": "no_such_question", "calls": [call]},  # an unknown id is ignored
    )
    saved = tmp_path / "r.json"
    result = _invoke(cassette, "--json", str(saved), "--min-accuracy", "1")
    assert result.exit_code == 1, result.output  # scored, below the minimum
    assert "\x1b" not in result.stdout
    category = load_report(saved).scenarios[0]
    accuracy = category.metric("accuracy")
    assert accuracy is not None
    assert (accuracy.numerator, accuracy.denominator) == (0, 1)
    assert all(len(note) < 10_000 for note in category.notes)
    assert not any("\x1b" in note for note in category.notes)
