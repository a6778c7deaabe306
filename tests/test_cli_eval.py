"""`handrail eval`: bfcl, report and compare from the command line, with their exit codes.

Exit 0 when everything held, 1 when expectations failed or something regressed, 2 for
errors the operator can fix (one line on stderr).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from _bfcl_reference import reference_answers
from _hand_reports import report, scenario, two_scenarios
from _http_server import LoopbackServer, QuietHandler, run_server
from handrail.cli import app
from handrail.eval.bfcl import load_questions
from handrail.eval.report import EvalReport, Metric, ScenarioResult, load_report

WIDE = {"COLUMNS": "200"}


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, ["eval", *args], env={**WIDE, **(env or {})})


def _cassette(path: Path, categories: list[str], limit: int, *, spoil: str | None = None) -> Path:
    answers = reference_answers(load_questions(categories, limit=limit))
    with path.open("w", encoding="utf-8") as out:
        for question, answer in answers.items():
            calls = [{"name": c.name, "arguments": c.arguments} for c in answer.calls]
            if question == spoil:
                calls = []
            out.write(json.dumps({"id": question, "calls": calls}) + "\n")
    return path


def test_bfcl_scores_a_cassette_and_writes_json_and_html(tmp_path: Path) -> None:
    cassette = _cassette(tmp_path / "answers.jsonl", ["simple_python", "multiple"], 5)
    result = _invoke(
        "bfcl",
        "--answers",
        str(cassette),
        "--categories",
        "multiple,simple_python",
        "--limit",
        "5",
        "--json",
        str(tmp_path / "r.json"),
        "--html",
        str(tmp_path / "r.html"),
    )
    assert result.exit_code == 0, result.output
    assert "cassette answers.jsonl" in result.stdout
    saved = load_report(tmp_path / "r.json")
    assert [(s.name, s.cases) for s in saved.scenarios] == [("simple_python", 5), ("multiple", 5)]
    assert saved.total("accuracy") == Metric.rate("accuracy", 10, 10)
    assert (tmp_path / "r.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_bfcl_exits_1_when_a_category_is_below_the_minimum(tmp_path: Path) -> None:
    cassette = _cassette(tmp_path / "a.jsonl", ["multiple"], 4, spoil="multiple_2")
    args = ("bfcl", "--answers", str(cassette), "-c", "multiple", "--limit", "4")
    assert _invoke(*args, "--min-accuracy", "0.75").exit_code == 0
    failed = _invoke(*args, "--min-accuracy", "0.8")
    assert failed.exit_code == 1
    assert "accuracy 75.0% is below the minimum 80.0%" in failed.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give either --answers FILE.jsonl or --endpoint URL"),
        (("--answers", "a.jsonl", "--endpoint", "http://127.0.0.1:9/v1"), "give either"),
        (("--endpoint", "http://127.0.0.1:9/v1"), "--endpoint needs --model"),
        (
            (
                "--endpoint",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--api-key-env",
                "NO_SUCH_VAR_X",
            ),
            "NO_SUCH_VAR_X, which is not set",
        ),
        (("--answers", "missing.jsonl"), "missing.jsonl"),
    ],
)
def test_bfcl_refuses_what_it_cannot_run_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_SUCH_VAR_X", raising=False)
    result = _invoke("bfcl", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_bfcl_refuses_a_multi_turn_category_with_a_reason(tmp_path: Path) -> None:
    cassette = tmp_path / "a.jsonl"
    cassette.write_text("", encoding="utf-8")
    result = _invoke("bfcl", "--answers", str(cassette), "-c", "simple_python", "-c", "memory")
    assert result.exit_code == 2
    assert "BFCL category 'memory' is agentic" in result.stderr


class _NoCallServer(LoopbackServer):
    def __init__(self) -> None:
        super().__init__("127.0.0.1", _NoCallHandler)
        self.authorizations: list[str] = []


class _NoCallHandler(QuietHandler):
    """A Chat Completions server whose model never calls a tool."""

    server: _NoCallServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.authorizations.append(self.headers.get("Authorization", ""))
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "None of these fit."},
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }
        payload = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def no_call_server() -> Iterator[_NoCallServer]:
    with run_server(_NoCallServer()) as server:
        yield server


def test_bfcl_asks_a_model_at_an_endpoint_with_the_named_key(
    no_call_server: _NoCallServer, tmp_path: Path
) -> None:
    result = _invoke(
        "bfcl",
        "--endpoint",
        f"http://127.0.0.1:{no_call_server.port}/v1",
        "--model",
        "m",
        "--api-key-env",
        "EVAL_TEST_KEY",
        "-c",
        "irrelevance,live_relevance",
        "--limit",
        "2",
        "--json",
        str(tmp_path / "r.json"),
        env={"EVAL_TEST_KEY": "sk-test"},
    )
    assert result.exit_code == 0, result.output
    saved = load_report(tmp_path / "r.json")
    assert saved.model == "openai-chat/m"
    [irrelevance, relevance] = saved.scenarios
    assert irrelevance.metric("accuracy") == Metric.rate("accuracy", 2, 2)
    assert relevance.metric("accuracy") == Metric.rate("accuracy", 0, 2)
    assert saved.total("tokens") == Metric.amount("tokens", 40)
    assert no_call_server.authorizations == ["Bearer sk-test"] * 4


def _save(path: Path, saved: EvalReport) -> Path:
    path.write_text(saved.model_dump_json(), encoding="utf-8")
    return path


def test_report_shows_a_saved_report_writes_its_page_and_exits_1_when_it_failed(
    tmp_path: Path,
) -> None:
    saved = _save(tmp_path / "r.json", two_scenarios())
    result = _invoke("report", str(saved), "--html", str(tmp_path / "r.html"))
    assert result.exit_code == 1
    assert "lost_answer" in result.stdout
    assert 'data-metric="success_rate"' in (tmp_path / "r.html").read_text(encoding="utf-8")
    passing = _save(tmp_path / "p.json", report(scenario("s", Metric.amount("retries", 0))))
    assert _invoke("report", str(passing)).exit_code == 0


def test_a_file_that_is_not_a_report_is_refused_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"version": 2}', encoding="utf-8")
    result = _invoke("report", str(tmp_path / "x.json"))
    assert result.exit_code == 2
    assert "is not a report handrail eval wrote" in result.stderr


def _with(metric: Metric, *, passed: bool = True) -> EvalReport:
    return report(
        ScenarioResult(name="s", title="S", passed=passed, metrics=(metric,)), totals=(metric,)
    )


def test_compare_exits_1_on_a_regression_and_0_within_the_tolerance(tmp_path: Path) -> None:
    before = _save(tmp_path / "a.json", _with(Metric.rate("success_rate", 90, 100)))
    after = _save(tmp_path / "b.json", _with(Metric.rate("success_rate", 89, 100)))
    regressed = _invoke("compare", str(before), str(after))
    assert regressed.exit_code == 1
    assert "REGRESSED" in regressed.stdout
    assert _invoke("compare", str(before), str(after), "--tolerance", "0.02").exit_code == 0
    assert _invoke("compare", str(after), str(before)).exit_code == 0


def test_compare_exits_1_when_a_scenario_now_fails(tmp_path: Path) -> None:
    metric = Metric.amount("retries", 0)
    before = _save(tmp_path / "a.json", _with(metric))
    after = _save(tmp_path / "b.json", _with(metric, passed=False))
    result = _invoke("compare", str(before), str(after), "--all")
    assert result.exit_code == 1
    assert "now failing: s" in result.stdout
    assert "retries" in result.stdout  # --all shows what did not change


def test_compare_refuses_reports_of_two_suites_with_exit_2(tmp_path: Path) -> None:
    before = _save(tmp_path / "a.json", report(suite="builtin"))
    after = _save(tmp_path / "b.json", report(suite="bfcl"))
    result = _invoke("compare", str(before), str(after))
    assert result.exit_code == 2
    assert "different suites" in result.stderr


def test_the_built_in_suite_is_the_run_command() -> None:
    result = _invoke("run", "--help")
    assert result.exit_code == 0
    assert "built-in" in result.stdout
