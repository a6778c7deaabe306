"""`run_bfcl` on BFCL's own data: reference answers score 100%, spoiled ones exactly as predicted.

The data is bfcl-eval 2026.3.23's (pinned); the predicted numbers below follow from
the questions named in each test and the rules of `handrail.eval.bfcl`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from _bfcl_reference import UNANSWERABLE, reference_answers, some_arguments
from handrail.clock import FixedClock
from handrail.errors import ConfigurationError
from handrail.eval._bfcl_tools import question_tools
from handrail.eval.bfcl import (
    CATEGORIES,
    Answer,
    ProposedCall,
    category_result,
    from_cassette,
    load_cassette,
    load_questions,
    run_bfcl,
)
from handrail.eval.report import EvalReport, Metric, ScenarioResult

pytestmark = pytest.mark.anyio


def _call(name: str, arguments: object) -> ProposedCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ProposedCall(name=name, arguments=text)


async def _run(
    answers: Mapping[str, Answer], categories: tuple[str, ...], limit: int | None = None
) -> EvalReport:
    return await run_bfcl(
        from_cassette(answers),
        model="cassette",
        clock=FixedClock(),
        categories=categories,
        limit=limit,
    )


def _metrics(result: ScenarioResult) -> dict[str, Metric]:
    return {metric.name: metric for metric in result.metrics}


def _write_cassette(path: Path, answers: Mapping[str, Answer]) -> None:
    lines = [
        json.dumps(
            {
                "id": question,
                "calls": [{"name": c.name, "arguments": c.arguments} for c in answer.calls],
            }
        )
        for question, answer in answers.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


async def test_a_cassette_of_the_possible_answers_scores_every_answerable_question(
    tmp_path: Path,
) -> None:
    questions = load_questions(CATEGORIES)
    cassette = tmp_path / "reference.jsonl"
    _write_cassette(cassette, reference_answers(questions))
    report = await run_bfcl(
        from_cassette(load_cassette(cassette)), model="reference", clock=FixedClock()
    )
    assert [s.name for s in report.scenarios] == list(CATEGORIES)
    assert sum(s.cases for s in report.scenarios) == len(questions) == 3641
    wrong = {note.split(": ", 1)[0] for s in report.scenarios for note in s.notes}
    assert wrong == set(UNANSWERABLE)
    for scenario in report.scenarios:
        pinned = sum(1 for q in UNANSWERABLE if q.rsplit("_", 1)[0] == scenario.name)
        metrics = _metrics(scenario)
        assert metrics["accuracy"] == Metric.rate(
            "accuracy", scenario.cases - pinned, scenario.cases
        )
        assert metrics["nonexistent_tools"].value == 0
        if "correct_tool_rate" in metrics:
            assert metrics["correct_tool_rate"].value == 1.0
        if pinned == 0 and "field_accuracy" in metrics:
            assert metrics["field_accuracy"].value == 1.0
            assert metrics["schema_pass_rate"].value == 1.0
    assert report.total("accuracy") == Metric.rate("accuracy", 3641 - 20, 3641)
    assert report.total("calls_when_none_expected") == Metric.amount("calls_when_none_expected", 0)


async def test_spoiled_simple_answers_score_exactly_what_each_spoiling_costs() -> None:
    answers = {
        # float for integer (converted), case and punctuation in a string: still right
        "simple_python_0": Answer(
            calls=(_call("calculate_triangle_area", {"base": 10.0, "height": 5, "unit": "U-nits"}),)
        ),
        "simple_python_1": Answer(calls=(_call("math.fact", {"number": 5}),)),  # no such tool
        "simple_python_2": Answer(calls=(_call("math.hypot", '{"x": 4, "y": 5'),)),  # cut JSON
        "simple_python_3": Answer(
            calls=(_call("algebra.quadratic_roots", {"a": "1", "b": -3, "c": 2}),)  # type
        ),
        "simple_python_4": Answer(
            calls=(_call("solve_quadratic_equation", {"a": 2, "b": 6, "c": 6}),)  # one value
        ),
        "simple_python_5": Answer(  # the right call, twice
            calls=(_call("solve_quadratic", {"a": 3, "b": -11, "c": -4, "root_type": "all"}),) * 2
        ),
    }
    report = await _run(answers, ("simple_python",), limit=6)
    [scenario] = report.scenarios
    assert scenario.cases == 6
    assert _metrics(scenario) == {
        "accuracy": Metric.rate("accuracy", 1, 6),
        "correct_tool_rate": Metric.rate("correct_tool_rate", 5, 6),
        "field_accuracy": Metric.rate("field_accuracy", 3 + 0 + 0 + 0 + 2 + 4, 17),
        "nonexistent_tools": Metric.amount("nonexistent_tools", 1),
        "json_pass_rate": Metric.rate("json_pass_rate", 5, 6),
        "schema_pass_rate": Metric.rate("schema_pass_rate", 4, 6),
    }
    reasons = dict(note.split(": ", 1) for note in scenario.notes)
    assert sorted(reasons) == [f"simple_python_{i}" for i in range(1, 6)]
    assert "names no offered function" in reasons["simple_python_1"]
    assert "not acceptable JSON" in reasons["simple_python_2"]
    assert "$.a" in reasons["simple_python_3"]
    assert "c=6 is not among 5" in reasons["simple_python_4"]
    assert reasons["simple_python_5"] == "2 call(s) made, 1 expected"
    assert scenario.passed  # no minimum accuracy was asked for


async def test_parallel_calls_pair_in_any_order_but_one_to_one() -> None:
    questions = load_questions(["parallel"], limit=3)
    reference = reference_answers(questions)
    first = reference["parallel_0"].calls
    answers = {
        "parallel_0": Answer(calls=first[::-1]),  # reversed: still right
        # both calls fit the first expected call only: 3 + 2 fields, not one to one
        "parallel_1": Answer(
            calls=(
                _call("calculate_em_force", {"b_field": 5, "area": 2, "d_time": 4}),
                _call("calculate_em_force", {"b_field": 5, "area": 2, "d_time": 4}),
            )
        ),
        # the first call leaves out what may be left out
        "parallel_2": Answer(
            calls=(
                _call("calculate_resistance", {"length": 5, "area": 0.01}),
                _call(
                    "calculate_resistance", {"length": 5, "area": 0.01, "resistivity": "aluminum"}
                ),
            )
        ),
    }
    report = await _run(answers, ("parallel",), limit=3)
    [scenario] = report.scenarios
    metrics = _metrics(scenario)
    assert metrics["accuracy"] == Metric.rate("accuracy", 2, 3)
    assert metrics["field_accuracy"] == Metric.rate("field_accuracy", 4 + 5 + 6, 16)
    assert metrics["correct_tool_rate"] == Metric.rate("correct_tool_rate", 6, 6)
    assert scenario.notes == (
        "parallel_1: the calls do not pair one to one with the expected calls",
    )


async def test_irrelevance_counts_every_call_made_where_none_was_expected() -> None:
    questions = load_questions(["irrelevance"], limit=3)
    offered = questions[1].functions[0]["name"]
    tools = question_tools(questions[1], clock=FixedClock())
    tool = tools.lookup(offered)
    assert tool is not None
    answers = {
        "irrelevance_0": Answer(),
        "irrelevance_1": Answer(
            calls=(_call(offered, some_arguments(dict(tool.spec.input_schema))),)
        ),
        "irrelevance_2": Answer(calls=(_call("no.such_tool", {}), _call("another", "{}"))),
    }
    report = await _run(answers, ("irrelevance",), limit=3)
    [scenario] = report.scenarios
    assert _metrics(scenario) == {
        "accuracy": Metric.rate("accuracy", 1, 3),
        "calls_when_none_expected": Metric.amount("calls_when_none_expected", 3),
        "nonexistent_tools": Metric.amount("nonexistent_tools", 2),
        "json_pass_rate": Metric.rate("json_pass_rate", 1, 1),
        "schema_pass_rate": Metric.rate("schema_pass_rate", 1, 1),
    }


async def test_relevance_needs_one_call_that_passes_the_checks() -> None:
    questions = load_questions(["live_relevance"], limit=3)
    calls = []
    for question in questions:
        name = question.functions[0]["name"]
        tool = question_tools(question, clock=FixedClock()).lookup(name)
        assert tool is not None
        calls.append((name, some_arguments(dict(tool.spec.input_schema))))
    answers = {
        questions[0].id: Answer(),
        questions[1].id: Answer(calls=(_call(*calls[1]),)),
        questions[2].id: Answer(calls=(_call(calls[2][0], {"not_a_parameter": 1}),)),
    }
    report = await _run(answers, ("live_relevance",), limit=3)
    [scenario] = report.scenarios
    metrics = _metrics(scenario)
    assert metrics["accuracy"] == Metric.rate("accuracy", 1, 3)
    assert metrics["schema_pass_rate"] == Metric.rate("schema_pass_rate", 1, 2)
    assert "correct_tool_rate" not in metrics


async def test_a_question_the_cassette_lacks_is_unanswered_and_wrong() -> None:
    report = await _run({}, ("multiple",), limit=2)
    [scenario] = report.scenarios
    assert _metrics(scenario)["accuracy"] == Metric.rate("accuracy", 0, 2)
    assert _metrics(scenario)["json_pass_rate"] == Metric.rate("json_pass_rate", 0, 0)
    assert scenario.notes == (
        "multiple_0: unanswered: the cassette has no answer",
        "multiple_1: unanswered: the cassette has no answer",
    )


async def test_a_category_below_the_minimum_accuracy_fails_and_totals_add_counts() -> None:
    questions = load_questions(["simple_python", "multiple"], limit=4)
    answers = dict(reference_answers(questions))
    del answers["multiple_0"]
    report = await run_bfcl(
        from_cassette(answers),
        model="cassette",
        clock=FixedClock(),
        categories=["multiple", "simple_python"],
        limit=4,
        min_accuracy=0.8,
    )
    assert [(s.name, s.passed) for s in report.scenarios] == [
        ("simple_python", True),
        ("multiple", False),
    ]
    assert report.scenarios[1].failures == ("accuracy 75.0% is below the minimum 80.0%",)
    assert not report.passed
    assert report.total("accuracy") == Metric.rate("accuracy", 7, 8)
    assert report.suite == "bfcl"


@pytest.mark.parametrize(
    ("category", "word"), [("multi_turn_base", "multi-turn"), ("memory", "agentic")]
)
async def test_categories_the_matcher_cannot_score_are_refused_with_a_reason(
    category: str, word: str
) -> None:
    with pytest.raises(ConfigurationError, match=word):
        await _run({}, (category,))


async def test_an_unknown_category_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no BFCL category 'simple'"):
        await _run({}, ("simple",))


async def test_a_call_an_adapter_marked_defective_fails_the_json_stage() -> None:
    cut = ProposedCall(name="math.factorial", arguments='{"number": 5}', defect="cut off")
    report = await _run({"simple_python_1": Answer(calls=(cut,))}, ("simple_python",), limit=2)
    [scenario] = report.scenarios
    assert scenario.metric("json_pass_rate") == Metric.rate("json_pass_rate", 0, 1)
    assert "simple_python_1: math.factorial: The arguments are not acceptable JSON: cut off." in (
        scenario.notes
    )


async def test_questions_answered_concurrently_are_reported_in_their_order() -> None:
    questions = load_questions(["parallel", "irrelevance"], limit=5)
    heard: list[str] = []
    report = await run_bfcl(
        from_cassette(reference_answers(questions)),
        model="cassette",
        clock=FixedClock(),
        categories=["irrelevance", "parallel"],
        limit=5,
        concurrency=3,
        on_scored=lambda score: heard.append(score.question),
    )
    assert sorted(heard) == sorted(q.id for q in questions)
    assert [s.name for s in report.scenarios] == ["parallel", "irrelevance"]
    assert report.total("accuracy") == Metric.rate("accuracy", 10, 10)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"min_accuracy": 1.5}, "between 0 and 1"), ({"concurrency": 0}, "at least 1")],
)
async def test_options_out_of_range_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        await run_bfcl(from_cassette({}), model="m", clock=FixedClock(), **options)  # type: ignore[arg-type]


def test_a_category_with_no_question_scored_fails() -> None:
    result = category_result("multiple", [])
    assert not result.passed
    assert result.failures == ("no question was scored",)
