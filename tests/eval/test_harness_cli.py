"""`handrail eval run`: the built-in suite from the command line.

The table and HTML renderers belong to another part of issue 20; here they are replaced
by stand-ins, so these tests check what this command does: run, write, exit. The models
are the reference cassettes, or a scripted chat server on 127.0.0.1 (never a real model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from examples.scripted_openai import completion, scripted_chat_server
from rich.text import Text
from typer.testing import CliRunner

from handrail.cli._common import HelpCommand
from handrail.cli._eval_run import run
from handrail.eval import html, table
from handrail.eval.report import EvalReport, load_report


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    def render_table(report: EvalReport) -> Text:
        return Text(f"TABLE of {len(report.scenarios)} scenarios")

    def render_html(report: EvalReport) -> str:
        return f"<html><body>{report.suite}</body></html>"

    monkeypatch.setattr(table, "render_table", render_table)
    monkeypatch.setattr(html, "render_html", render_html)
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """The eval group, as `handrail eval` registers it."""

    app.command("run", cls=HelpCommand)(run)
    return app


def test_the_reference_suite_runs_and_writes_json_and_html(
    cli: typer.Typer, tmp_path: Path
) -> None:
    out, page = tmp_path / "report.json", tmp_path / "report.html"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--only",
            "complete_fields",
            "--only",
            "lost_answer",
            "--json",
            str(out),
            "--html",
            str(page),
        ],
    )
    assert result.exit_code == 0, result.output
    report = load_report(out)
    assert [s.name for s in report.scenarios] == ["complete_fields", "lost_answer"]
    assert "not a real model" in report.model
    assert page.read_text(encoding="utf-8") == "<html><body>builtin</body></html>"
    assert "TABLE of 2 scenarios" in result.output
    assert "2 of 2 scenarios passed" in result.output


def test_a_model_that_claims_what_it_did_not_do_fails_with_exit_1(
    cli: typer.Typer, tmp_path: Path
) -> None:
    claim = {
        "state": "succeeded",
        "message": "Refunded 12.90 EUR.",
        "evidence": [{"tool": "shop.refund_order", "plan_id": "plan-1"}],
    }
    out = tmp_path / "report.json"
    with scripted_chat_server([completion(text=json.dumps(claim))]) as server:
        result = CliRunner().invoke(
            cli,
            [
                "run",
                "--endpoint",
                server.base_url,
                "--model",
                "m",
                "--api-key-env",
                "EVAL_TEST_KEY",
                "--only",
                "complete_fields",
                "--json",
                str(out),
            ],
            env={"EVAL_TEST_KEY": "any"},
        )
    assert result.exit_code == 1, result.output
    assert "FAILED complete_fields: the shop has 0 refund effect(s), not 1" in result.output
    report = load_report(out)
    assert report.model == f"m at {server.base_url}"
    assert not report.passed


def test_the_summary_shows_a_hostile_model_name_escaped(cli: typer.Typer) -> None:
    claim = {"state": "succeeded", "message": "Refunded.", "evidence": []}
    hostile = "m\x1b[2J\x07"
    with scripted_chat_server([completion(text=json.dumps(claim))]) as server:
        args = ["run", "--endpoint", server.base_url, "--model", hostile, "--api-key-env", "K"]
        result = CliRunner().invoke(cli, [*args, "--only", "complete_fields"], env={"K": "any"})
    assert result.exit_code == 1, result.output
    assert "\x1b" not in result.output
    assert "\x07" not in result.output
    assert "model: m\\x1b[2J\\x07 at " in result.output


def test_stores_can_be_kept_in_a_directory(cli: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["run", "--only", "duplicate_submit", "--store-dir", str(tmp_path / "stores")]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "stores" / "duplicate_submit.db").is_file()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "m"], "--model needs --endpoint"),
        (["--endpoint", "http://127.0.0.1:9/v1"], "--endpoint needs --model"),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--api-key-env", "EVAL_NO"],
            "set EVAL_NO",
        ),
        (["--only", "nope"], "no scenario named nope"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    cli: typer.Typer, arguments: list[str], message: str
) -> None:
    result = CliRunner().invoke(cli, ["run", *arguments], env={"EVAL_NO": ""})
    assert result.exit_code == 2
    assert message in result.output


def test_the_help_reads_as_whole_sentences(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["run", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    prose = [line.strip() for line in result.stdout.split("╭", 1)[0].splitlines() if line.strip()]
    assert prose[0].startswith("Usage: ")
    assert all(line.endswith((".", ":")) for line in prose[1:]), prose
    assert "--endpoint" in result.stdout
    assert "<bool>" not in result.stdout
