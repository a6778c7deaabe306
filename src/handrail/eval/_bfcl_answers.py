"""Where BFCL answers come from: a JSONL cassette, or a model behind an OpenAI-compatible API.

A cassette has one line per question: `{"id": ..., "calls": [{"name": ...,
"arguments": "<JSON text>"}]}`, names being BFCL's function names; an object instead
of the text is accepted as already decoded. A model is asked each question once, with
the question's functions as Handrail renders them; its calls come back under BFCL's
names. Neither judges an answer: `bfcl` scores them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from handrail.adapters.transcript import AssistantTurn, Turn, UserTurn
from handrail.errors import ConfigurationError
from handrail.eval._bfcl_data import Question, jsonl_entries
from handrail.eval._bfcl_tools import QuestionTools
from handrail.text import shown

if TYPE_CHECKING:
    from handrail.loop.models import ModelClient

__all__ = [
    "Answer",
    "Answerer",
    "ProposedCall",
    "ask_model",
    "from_cassette",
    "load_cassette",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProposedCall:
    """One call of an answer, as proposed: BFCL's function name and the raw arguments."""

    name: str
    arguments: str | bytes | Mapping[str, Any] | None
    defect: str | None = None
    """Set when the call arrived unusable (a stream cut off): refused at stage 1."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """The calls proposed for one question, or why there is no answer at all."""

    calls: tuple[ProposedCall, ...] = ()
    missing: str | None = None
    """Why the question went unanswered (no line in the cassette, a model error)."""
    tokens: int | None = None
    """Tokens the model used for it, when a model was asked."""


Answerer: TypeAlias = Callable[[Question, QuestionTools], Awaitable[Answer]]
"""Answers one question, given its functions registered as tools."""


def _call(item: object, where: str) -> ProposedCall:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise ConfigurationError(f"{where}: a call is not an object with a name")
    arguments = item.get("arguments")
    if arguments is not None and not isinstance(arguments, str | dict):
        raise ConfigurationError(f"{where}: a call's arguments are neither JSON text nor an object")
    return ProposedCall(name=item["name"], arguments=arguments)


def load_cassette(path: Path) -> Mapping[str, Answer]:
    """The answers of a JSONL cassette, by question id (ConfigurationError if unreadable)."""
    answers: dict[str, Answer] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigurationError(f"{path.name}: not UTF-8 text") from None
    for where, entry in jsonl_entries(text, path.name):
        calls = entry.get("calls", [])
        if not isinstance(calls, list):
            raise ConfigurationError(f"{where}: calls is not a list")
        if entry["id"] in answers:
            raise ConfigurationError(f"{where}: a second answer to {shown(entry['id'])}")
        answers[entry["id"]] = Answer(calls=tuple(_call(item, where) for item in calls))
    return answers


def from_cassette(answers: Mapping[str, Answer]) -> Answerer:
    """An answerer reading a cassette; a question it lacks is unanswered."""

    async def answer(question: Question, tools: QuestionTools) -> Answer:  # noqa: ARG001 - an Answerer
        found = answers.get(question.id)
        return found if found is not None else Answer(missing="the cassette has no answer")

    return answer


def _transcript(question: Question) -> tuple[str | None, tuple[Turn, ...]]:
    system = "\n\n".join(text for role, text in question.messages if role == "system") or None
    turns: list[Turn] = []
    for role, text in question.messages:
        if role == "user":
            turns.append(UserTurn(text=text))
        elif role == "assistant":
            turns.append(AssistantTurn(text=text))
    return system, tuple(turns)


def ask_model(client: ModelClient, *, timeout: float) -> Answerer:
    """An answerer asking `client` each question once (`run_bfcl` bounds how many at once).

    The client renders the question's tools itself; a call to a name no tool has
    keeps the name the model wrote. A ModelError leaves the question unanswered, with
    its code and message.
    """
    from handrail.loop.models import ModelError, ModelRequest  # noqa: PLC0415 - on use

    async def answer(question: Question, tools: QuestionTools) -> Answer:
        system, turns = _transcript(question)
        request = ModelRequest(transcript=turns, tools=tools.specs(), system=system)
        try:
            reply = await client.complete(request, timeout=timeout)
        except ModelError as exc:
            return Answer(missing=f"the model failed: {exc.code}: {str(exc)[:200]}")
        calls = tuple(
            ProposedCall(
                name=tools.by_tool.get(call.name, call.name),
                arguments=call.arguments,
                defect=call.defect,
            )
            for call in reply.calls
        )
        return Answer(calls=calls, tokens=reply.usage.input_tokens + reply.usage.output_tokens)

    return answer
