"""Scoring one BFCL answer: Handrail's lookup, syntax and schema stages, then the matcher.

Each proposed call is looked up in the question's registry (a name no function has
is a non-existent tool), its arguments decoded by stage 1 and checked by stage 2
exactly as the gate would; only arguments that passed both reach the matcher. The
question is then judged by what it expects: the listed calls one to one in any order
(and no other call), no call at all, or at least one valid call. Never runs a tool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from handrail.checks.schema import validate_arguments
from handrail.checks.syntax import ArgumentLimits, parse_arguments, refuse_defect
from handrail.errors import Refusal
from handrail.eval._bfcl_answers import Answer, ProposedCall
from handrail.eval._bfcl_data import Expectation, Question
from handrail.eval._bfcl_match import best_pairing, match_call
from handrail.eval._bfcl_tools import QuestionTools

__all__ = ["QuestionScore", "score_answer"]

_LIMITS: Final = ArgumentLimits()


@dataclass(frozen=True, kw_only=True, slots=True)
class QuestionScore:
    """The counts one answered question adds to its category's metrics."""

    question: str
    expectation: Expectation
    accepted: bool
    reason: str | None = None
    """Why the answer was not accepted, in one sentence."""
    calls: int = 0
    nonexistent: int = 0
    reached: int = 0
    """Calls naming an offered function, which stage 1 then checks."""
    json_ok: int = 0
    schema_ok: int = 0
    expected_calls: int = 0
    named_right: int = 0
    """Expected calls matched by a proposed call of the same function, one to one."""
    fields: int = 0
    fields_matched: int = 0
    tokens: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Checked:
    call: ProposedCall
    arguments: Mapping[str, Any] | None = None
    """The arguments as stage 2 returned them; None when a stage refused the call."""
    refusal: str | None = None


def _check(call: ProposedCall, tools: QuestionTools) -> tuple[_Checked, int]:
    """The call through lookup, stage 1 and stage 2; the number of stages it passed."""
    tool = tools.lookup(call.name)
    if tool is None:
        return _Checked(call=call, refusal=f"{call.name!r} names no offered function"), 0
    try:
        if call.defect is not None:
            raise refuse_defect(call.defect)
        decoded = parse_arguments(call.arguments, _LIMITS, write=False)
    except Refusal as refusal:
        return _Checked(call=call, refusal=f"{call.name}: {refusal.summary}"), 1
    try:
        bound = validate_arguments(tool, decoded)
    except Refusal as refusal:
        fields = "; ".join(f"{p} {m}" for p, m in list(refusal.field_errors.items())[:3])
        return _Checked(call=call, refusal=f"{call.name}: schema refused: {fields}"), 2
    return _Checked(call=call, arguments=bound.json), 3


def _pairing(question: Question, checked: list[_Checked]) -> tuple[int, int, str | None]:
    """Fields matched by the best pairing, accepted pairs, and why the pairing falls short.

    The reason is about the first call no expected call accepts: another function, or
    its mismatch with the closest expected call of its function; or, when each call
    alone is acceptable somewhere, that they cannot be paired one to one.
    """
    expected = question.expected
    fields: list[list[int]] = []
    accepts: list[list[int]] = []
    reason: str | None = None
    for item in checked:
        found = [
            match_call(item.arguments, slot)
            if item.arguments is not None and item.call.name == slot.function
            else None
            for slot in expected
        ]
        fields.append([0 if f is None else f.matched for f in found])
        accepts.append([1 if f is not None and f.accepted else 0 for f in found])
        tried = [f for f in found if f is not None]
        if item.arguments is None:
            continue  # refused by a stage: that refusal is the reason
        if reason is None and not tried:
            wanted = ", ".join(sorted({slot.function for slot in expected}))
            reason = f"{item.call.name} is not an expected function ({wanted})"
        elif reason is None and not any(f.accepted for f in tried):
            reason = max(tried, key=lambda f: f.matched).reason
    matched = best_pairing(fields, len(expected))
    paired = best_pairing(accepts, len(expected))
    if reason is None and paired < len(expected):
        reason = "the calls do not pair one to one with the expected calls"
    return matched, paired, reason


def _named_right(question: Question, answer: Answer) -> int:
    wanted = Counter(slot.function for slot in question.expected)
    made = Counter(call.name for call in answer.calls)
    return sum((wanted & made).values())


def score_answer(question: Question, tools: QuestionTools, answer: Answer) -> QuestionScore:
    """Score one answer to one question (see the module docstring for the rules)."""
    expected_calls = len(question.expected)
    fields = sum(len(slot.params) for slot in question.expected)
    if answer.missing is not None:
        return QuestionScore(
            question=question.id,
            expectation=question.expectation,
            accepted=False,
            reason=f"unanswered: {answer.missing}",
            expected_calls=expected_calls,
            fields=fields,
            tokens=answer.tokens,
        )
    checked: list[_Checked] = []
    passed = Counter[int]()
    for call in answer.calls:
        item, stages = _check(call, tools)
        checked.append(item)
        passed.update(range(stages + 1))
    refused = next((item.refusal for item in checked if item.refusal is not None), None)
    matched, reason = _judge(question, checked, refused)
    return QuestionScore(
        question=question.id,
        expectation=question.expectation,
        accepted=reason is None,
        reason=reason,
        calls=len(checked),
        nonexistent=len(checked) - passed[1],
        reached=passed[1],
        json_ok=passed[2],
        schema_ok=passed[3],
        expected_calls=expected_calls,
        named_right=_named_right(question, answer),
        fields=fields,
        fields_matched=matched,
        tokens=answer.tokens,
    )


def _judge(
    question: Question, checked: list[_Checked], refused: str | None
) -> tuple[int, str | None]:
    """Fields matched, and why the answer is not accepted (None: it is)."""
    if question.expectation is Expectation.NO_CALL:
        return 0, f"{len(checked)} call(s) where none was expected" if checked else None
    if question.expectation is Expectation.SOME_CALL:
        if any(item.arguments is not None for item in checked):
            return 0, None
        return 0, refused or "no call where one was expected"
    matched, paired, mismatch = _pairing(question, checked)
    expected = len(question.expected)
    if len(checked) != expected:
        return matched, f"{len(checked)} call(s) made, {expected} expected"
    if refused is not None:
        return matched, refused
    return matched, mismatch if paired < expected else None
