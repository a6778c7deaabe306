"""`handrail eval bfcl`: BFCL's single-turn questions scored with Handrail's own checks.

Each question's functions become tools in a registry of its own (`_bfcl_tools`); each
proposed call goes through lookup, JSON syntax and JSON Schema as the gate checks
them (`_bfcl_score`), then an argument matcher written from BFCL's documented rules
(`_bfcl_match`). Answers come from a JSONL cassette or a model (`_bfcl_answers`). The
report has one ScenarioResult per category (its `cases` are the questions) with:

- `accuracy`: questions whose answer is accepted: the expected calls one to one in
  any order and nothing else (irrelevance: no call; live relevance: a valid call);
- `correct_tool_rate`: expected calls met by a call naming their function;
- `field_accuracy`: parameters of the expected calls given an acceptable value (or
  rightly left out), under the pairing of calls that matches the most;
- `json_pass_rate`, `schema_pass_rate`: of the calls naming an offered function,
  those stage 1 decodes, and those that also pass stage 2;
- `nonexistent_tools`: calls naming no offered function;
- `calls_when_none_expected` (irrelevance categories): calls made at all;
- `tokens`, when a model was asked.

Totals add the counts of every category (so accuracy is over all questions, not an
average of categories). The data is read from the installed bfcl-eval package; its
code is never imported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final

from handrail.clock import Clock
from handrail.errors import ConfigurationError
from handrail.eval._bfcl_answers import (
    Answer,
    Answerer,
    ProposedCall,
    ask_model,
    from_cassette,
    load_cassette,
)
from handrail.eval._bfcl_data import CATEGORIES, REFUSED, Expectation, Question, load_questions
from handrail.eval._bfcl_score import QuestionScore, score_answer
from handrail.eval._bfcl_tools import question_tools, to_json_schema
from handrail.eval.report import EvalReport, Metric, ScenarioResult, total_metrics

__all__ = [
    "CATEGORIES",
    "REFUSED",
    "SUITE",
    "Answer",
    "Answerer",
    "ProposedCall",
    "QuestionScore",
    "ask_model",
    "category_result",
    "from_cassette",
    "load_cassette",
    "load_questions",
    "run_bfcl",
    "to_json_schema",
    "total_metrics",
]

SUITE: Final = "bfcl"
_NOTES: Final = 50
"""Wrongly answered questions listed in a category's notes, at most."""


def _sum(scores: Sequence[QuestionScore], field: str) -> int:
    return sum(getattr(score, field) for score in scores)


def _metrics(scores: Sequence[QuestionScore]) -> list[Metric]:
    expectation = scores[0].expectation if scores else None
    metrics = [Metric.rate("accuracy", sum(s.accepted for s in scores), len(scores))]
    if expectation is Expectation.CALLS:
        metrics += [
            Metric.rate(
                "correct_tool_rate", _sum(scores, "named_right"), _sum(scores, "expected_calls")
            ),
            Metric.rate("field_accuracy", _sum(scores, "fields_matched"), _sum(scores, "fields")),
        ]
    if expectation is Expectation.NO_CALL:
        metrics.append(Metric.amount("calls_when_none_expected", _sum(scores, "calls")))
    metrics += [
        Metric.amount("nonexistent_tools", _sum(scores, "nonexistent")),
        Metric.rate("json_pass_rate", _sum(scores, "json_ok"), _sum(scores, "reached")),
        Metric.rate("schema_pass_rate", _sum(scores, "schema_ok"), _sum(scores, "reached")),
    ]
    used = [score.tokens for score in scores if score.tokens is not None]
    if used:
        metrics.append(Metric.amount("tokens", sum(used)))
    return metrics


def category_result(
    category: str,
    scores: Sequence[QuestionScore],
    *,
    min_accuracy: float = 0.0,
) -> ScenarioResult:
    """One category's ScenarioResult: passed when its accuracy reaches `min_accuracy`."""
    metrics = _metrics(scores)
    accuracy = metrics[0].value
    failures: tuple[str, ...] = ()
    if accuracy is None:
        failures = ("no question was scored",)
    elif accuracy < min_accuracy:
        failures = (f"accuracy {accuracy:.1%} is below the minimum {min_accuracy:.1%}",)
    wrong = [f"{s.question}: {s.reason}" for s in scores if not s.accepted]
    if len(wrong) > _NOTES:
        wrong = [*wrong[:_NOTES], f"... and {len(wrong) - _NOTES} more questions"]
    return ScenarioResult(
        name=category,
        title=f"BFCL {CATEGORIES.get(category, category)}",
        passed=not failures,
        metrics=tuple(metrics),
        failures=failures,
        notes=tuple(wrong),
        cases=len(scores),
    )


async def run_bfcl(
    answerer: Answerer,
    *,
    model: str,
    clock: Clock,
    categories: Iterable[str] = tuple(CATEGORIES),
    limit: int | None = None,
    folder: Path | None = None,
    min_accuracy: float = 0.0,
    concurrency: int = 1,
    on_scored: Callable[[QuestionScore], None] | None = None,
) -> EvalReport:
    """Score the answers to the questions of `categories` (the first `limit` of each).

    `folder` is the BFCL data folder (default: the installed bfcl-eval's); at most
    `concurrency` questions are answered at a time; `on_scored` hears of each scored
    question (for progress). Raises ConfigurationError for a refused or unknown
    category, a minimum outside [0, 1], and data Handrail cannot read or register.
    """
    if not 0.0 <= min_accuracy <= 1.0:
        raise ConfigurationError("the minimum accuracy is a rate between 0 and 1")
    if concurrency < 1:
        raise ConfigurationError("concurrency must be at least 1")
    started = clock.now()
    questions = load_questions(categories, limit=limit, folder=folder)
    slots = asyncio.Semaphore(concurrency)

    async def one(question: Question) -> QuestionScore:
        async with slots:
            tools = question_tools(question, clock=clock)
            answer = await answerer(question, tools)
            score = score_answer(question, tools, answer)
        if on_scored is not None:
            on_scored(score)
        return score

    scores = await asyncio.gather(*(one(question) for question in questions))
    by_category: dict[str, list[QuestionScore]] = {}
    for question, score in zip(questions, scores, strict=True):
        by_category.setdefault(question.category, []).append(score)
    results = tuple(
        category_result(category, found, min_accuracy=min_accuracy)
        for category, found in by_category.items()
    )
    return EvalReport(
        suite=SUITE,
        model=model,
        started_at=started,
        finished_at=clock.now(),
        scenarios=results,
        totals=total_metrics(results),
    )
