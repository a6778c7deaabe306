"""Reading BFCL's data: what is refused, with the file and question named."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from handrail.errors import ConfigurationError
from handrail.eval._bfcl_data import data_folder, load_questions

_QUESTION = {
    "id": "simple_python_0",
    "question": [[{"role": "user", "content": "Go"}]],
    "function": [{"name": "f", "parameters": {"type": "dict", "properties": {}}}],
}
_ANSWER = {"id": "simple_python_0", "ground_truth": [{"f": {"n": [1]}}]}


def _folder(tmp_path: Path, question: object, answer: object) -> Path:
    (tmp_path / "possible_answer").mkdir()
    for path, entry in (
        (tmp_path / "BFCL_v4_simple_python.json", question),
        (tmp_path / "possible_answer" / "BFCL_v4_simple_python.json", answer),
    ):
        text = entry if isinstance(entry, str) else json.dumps(entry)
        path.write_text(f"\n{text}\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("question", "answer", "message"),
    [
        ("{not json", _ANSWER, r"BFCL_v4_simple_python.json:2: not JSON"),
        ({"question": []}, _ANSWER, "not an object with an id"),
        (_QUESTION, {"id": "simple_python_0", "ground_truth": []}, "no ground_truth calls"),
        (
            _QUESTION,
            {"id": "simple_python_0", "ground_truth": [{"f": {}}] * 17},
            "more than 16 expected calls",
        ),
        (
            _QUESTION,
            {"id": "simple_python_0", "ground_truth": [{"f": {}, "g": {}}]},
            "not {function",
        ),
        (_QUESTION, {"id": "simple_python_0", "ground_truth": [{"f": {"n": 1}}]}, "not lists"),
        (
            {**_QUESTION, "question": [[{"role": "tool", "content": "x"}]]},
            _ANSWER,
            "not a system, user or assistant text",
        ),
        ({**_QUESTION, "function": [{"description": "no name"}]}, _ANSWER, "named documents"),
    ],
)
def test_data_that_cannot_be_read_is_refused_with_its_place(
    tmp_path: Path, question: object, answer: object, message: str
) -> None:
    folder = _folder(tmp_path, question, answer)
    with pytest.raises(ConfigurationError, match=message):
        load_questions(["simple_python"], folder=folder)


def test_a_missing_data_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no file BFCL_v4_live_simple\.json"):
        load_questions(["live_simple"], folder=tmp_path)


def test_without_bfcl_eval_the_error_says_how_to_install_its_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigurationError, match=r"--no-deps -r requirements/eval\.txt"):
        data_folder()
