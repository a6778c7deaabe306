"""BFCL's single-turn questions and possible answers, read from the bfcl-eval data folder.

Owns the list of categories `handrail eval bfcl` scores (those answered by one turn of
calls, checked on their arguments) and those it refuses, finding the data folder of
the installed `bfcl-eval` package without importing it, and reading each category's
questions joined to their possible answers. Only data: it never imports bfcl-eval's
code (its dependencies are not installed) and never scores anything.
"""

from __future__ import annotations

import enum
import importlib.util
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from handrail.errors import ConfigurationError

__all__ = [
    "CATEGORIES",
    "REFUSED",
    "Expectation",
    "ExpectedCall",
    "Question",
    "check_categories",
    "data_folder",
    "jsonl_entries",
    "load_questions",
]

CATEGORIES: Final[Mapping[str, str]] = {
    "simple_python": "simple, Python",
    "simple_java": "simple, Java",
    "simple_javascript": "simple, JavaScript",
    "multiple": "one of multiple functions",
    "parallel": "parallel calls",
    "parallel_multiple": "parallel calls of multiple functions",
    "irrelevance": "irrelevance: no call expected",
    "live_simple": "live simple",
    "live_multiple": "live, one of multiple functions",
    "live_parallel": "live parallel calls",
    "live_parallel_multiple": "live parallel calls of multiple functions",
    "live_irrelevance": "live irrelevance: no call expected",
    "live_relevance": "live relevance: some call expected",
}
"""The BFCL v4 categories answered by one turn of calls, by name, with a title."""

REFUSED: Final[Mapping[str, str]] = {
    "multi_turn_base": "multi-turn",
    "multi_turn_miss_func": "multi-turn",
    "multi_turn_miss_param": "multi-turn",
    "multi_turn_long_context": "multi-turn",
    "memory": "agentic (memory backends)",
    "web_search": "agentic (web search)",
    "format_sensitivity": "prompt-format study, not scored on calls",
}
"""Categories BFCL has that an argument matcher cannot score, with what they are."""

_NO_CALL = frozenset({"irrelevance", "live_irrelevance"})
_SOME_CALL = frozenset({"live_relevance"})
_MAX_EXPECTED = 16
"""More expected calls than this in one question is refused: the matcher pairs calls
by a search over subsets of the expected ones (BFCL's questions expect at most 8)."""


class Expectation(enum.StrEnum):
    """What a question expects of the answer."""

    CALLS = "calls"
    """These calls, in any order, each with acceptable arguments."""
    NO_CALL = "no_call"
    """No call at all: none of the functions fits the question."""
    SOME_CALL = "some_call"
    """At least one valid call; its arguments cannot be listed in advance."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExpectedCall:
    """One call of a possible answer: the function and each parameter's acceptable values.

    A parameter whose values include `""` may be left out. A dict among the values
    is itself a pattern (each key with its acceptable values); a list is matched
    element by element, in order.
    """

    function: str
    params: Mapping[str, tuple[Any, ...]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    """One BFCL question: the conversation, the functions offered, what is expected."""

    id: str
    category: str
    messages: tuple[tuple[str, str], ...]
    """(role, content) pairs of the single turn: system, user and assistant messages."""
    functions: tuple[Mapping[str, Any], ...]
    """BFCL's function documents as shipped (name, description, parameters)."""
    expectation: Expectation
    expected: tuple[ExpectedCall, ...] = ()


def data_folder() -> Path:
    """The `data` folder of the installed bfcl-eval package, found without importing it."""
    # find_spec of a top-level name locates the package; it does not run its code.
    spec = importlib.util.find_spec("bfcl_eval")
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise ConfigurationError(
            "the BFCL data is not installed: install bfcl-eval alone, "
            "`pip install --no-deps -r requirements/eval.txt` (its own dependencies "
            "are not needed, only its data)",
        )
    folder = Path(next(iter(locations))) / "data"
    if not folder.is_dir():
        raise ConfigurationError(f"bfcl-eval is installed but has no data folder at {folder}")
    return folder


def check_categories(names: Iterable[str]) -> tuple[str, ...]:
    """The categories asked for, in BFCL's order, each once; unknown or refused ones raise."""
    asked = list(dict.fromkeys(names))
    for name in asked:
        if name in REFUSED:
            raise ConfigurationError(
                f"BFCL category {name!r} is {REFUSED[name]}: it is not answered by one turn "
                f"of calls, so the argument matcher cannot score it; scored categories: "
                f"{', '.join(CATEGORIES)}",
            )
        if name not in CATEGORIES:
            raise ConfigurationError(
                f"no BFCL category {name!r}; scored categories: {', '.join(CATEGORIES)}",
            )
    return tuple(name for name in CATEGORIES if name in asked)


def jsonl_entries(text: str, name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each JSON object with a string `id` of JSON Lines text, with its place (`name:line`).

    Blank lines are skipped; anything else raises ConfigurationError naming its line.
    """
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{where}: not JSON ({exc.msg})") from None
        except RecursionError:  # `[[[[...`: nested deeper than the decoder goes
            raise ConfigurationError(f"{where}: not JSON (nested too deep)") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ConfigurationError(f"{where}: not an object with an id")
        yield where, entry


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(f"the BFCL data has no file {path.name}") from None
    return (entry for _, entry in jsonl_entries(text, path.name))


def _expected(entry: Mapping[str, Any], where: str) -> tuple[ExpectedCall, ...]:
    truth = entry.get("ground_truth")
    if not isinstance(truth, list) or not truth:
        raise ConfigurationError(f"{where}: the possible answer has no ground_truth calls")
    if len(truth) > _MAX_EXPECTED:
        raise ConfigurationError(f"{where}: more than {_MAX_EXPECTED} expected calls")
    calls = []
    for call in truth:
        if not isinstance(call, dict) or len(call) != 1:
            raise ConfigurationError(f"{where}: an expected call is not {{function: params}}")
        [(function, params)] = call.items()
        if not isinstance(params, dict) or not all(isinstance(v, list) for v in params.values()):
            raise ConfigurationError(f"{where}: {function}'s values are not lists")
        calls.append(
            ExpectedCall(
                function=function,
                # A few answers write "an empty list" as no values at all (`[]` for a
                # required array): read as the one acceptable value [], not as none.
                params={name: tuple(values) or ([],) for name, values in params.items()},
            ),
        )
    return tuple(calls)


def _messages(entry: Mapping[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    turns = entry.get("question")
    if not isinstance(turns, list) or len(turns) != 1 or not isinstance(turns[0], list):
        raise ConfigurationError(f"{where}: not a single-turn question")
    messages = []
    for message in turns[0]:
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role not in {"system", "user", "assistant"} or not isinstance(content, str):
            raise ConfigurationError(f"{where}: a message is not a system, user or assistant text")
        messages.append((role, content))
    return tuple(messages)


def _functions(entry: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], ...]:
    functions = entry.get("function")
    if not isinstance(functions, list) or not all(
        isinstance(f, dict) and isinstance(f.get("name"), str) for f in functions
    ):
        raise ConfigurationError(f"{where}: the functions are not a list of named documents")
    return tuple(functions)


def _category(folder: Path, category: str, limit: int | None) -> list[Question]:
    name = f"BFCL_v4_{category}.json"
    if category in _NO_CALL or category in _SOME_CALL:
        answers: dict[str, dict[str, Any]] = {}
        expectation = Expectation.NO_CALL if category in _NO_CALL else Expectation.SOME_CALL
    else:
        answers = {entry["id"]: entry for entry in _lines(folder / "possible_answer" / name)}
        expectation = Expectation.CALLS
    questions: list[Question] = []
    for entry in _lines(folder / name):
        if limit is not None and len(questions) >= limit:
            break
        where = f"{name} {entry['id']}"
        expected: tuple[ExpectedCall, ...] = ()
        if expectation is Expectation.CALLS:
            if entry["id"] not in answers:
                raise ConfigurationError(f"{where}: no possible answer")
            expected = _expected(answers[entry["id"]], where)
        questions.append(
            Question(
                id=entry["id"],
                category=category,
                messages=_messages(entry, where),
                functions=_functions(entry, where),
                expectation=expectation,
                expected=expected,
            ),
        )
    return questions


def load_questions(
    categories: Iterable[str],
    *,
    limit: int | None = None,
    folder: Path | None = None,
) -> tuple[Question, ...]:
    """The questions of `categories` (the first `limit` of each), from `folder` or bfcl-eval's."""
    if limit is not None and limit < 1:
        raise ConfigurationError("a limit of questions must be at least 1")
    chosen = check_categories(categories)
    root = folder if folder is not None else data_folder()
    return tuple(q for category in chosen for q in _category(root, category, limit))
