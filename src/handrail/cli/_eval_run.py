"""`handrail eval run`: the built-in suite through the real loop, gate, writes and store.

Without `--endpoint`, the scripted model plays each scenario's reference cassette (it
is not a real model, and the report says so); with `--endpoint URL --model NAME`, an
OpenAI-compatible server drives every scenario, with the key read from the environment
variable `--api-key-env` names. Prints the report as a table, writes it as JSON
(`--json`) and as an HTML page (`--html`); exit status 1 when a scenario's expectations
did not hold, 2 for a usage error.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer
from rich.text import Text

from handrail.cli._common import CliError, console_for_output, one_line_errors
from handrail.text import shown

if TYPE_CHECKING:
    from rich.console import Console

    from handrail.eval.harness import ModelFactory
    from handrail.eval.report import EvalReport

__all__ = ["DEFAULT_API_KEY_ENV", "EXIT_FAILED", "run", "write_outputs"]

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
EXIT_FAILED: Final = 1
"""Expectations failed or something regressed (errors exit 2)."""


@one_line_errors
def run(
    *,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            metavar="URL",
            help=(
                "Base URL of an OpenAI-compatible server (such as http://127.0.0.1:8000/v1) "
                "whose model to evaluate. Without it, the scripted model plays the "
                "reference cassettes."
            ),
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="The model name to ask at --endpoint.")
    ] = None,
    api_key_env: Annotated[
        str,
        typer.Option(
            "--api-key-env",
            metavar="VAR",
            help="The environment variable holding the endpoint's API key.",
        ),
    ] = DEFAULT_API_KEY_ENV,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", metavar="NAME", help="Run only this scenario (repeatable)."),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", metavar="PATH", help="Write the report as JSON.")
    ] = None,
    html_path: Annotated[
        Path | None,
        typer.Option("--html", metavar="PATH", help="Write the report as an HTML page."),
    ] = None,
    store_dir: Annotated[
        Path | None,
        typer.Option(
            "--store-dir",
            metavar="DIR",
            help="Keep each scenario's store in a SQLite file in DIR (default: in memory).",
        ),
    ] = None,
) -> None:
    """Run the built-in evaluation suite and report every layer's metrics.

    Each scenario (complete and missing fields, same-name customers, no permission,
    direct and indirect prompt injection, a duplicate submit, a lost answer, a
    downstream failure, a changed resource, parallel reads, a declined plan, a planted
    secret) runs through the real agent loop, gate, writes and a store of its own.
    Exit status 1 when a scenario's expectations did not hold.
    """
    from handrail.eval.harness import run_suite  # noqa: PLC0415 - the core loads when it runs
    from handrail.telemetry import Telemetry  # noqa: PLC0415

    factory = _factory(endpoint, model, api_key_env)
    if store_dir is not None:
        store_dir.mkdir(parents=True, exist_ok=True)
    # Spans and metrics of the runs go where the standard OTEL_* variables say, if anywhere.
    telemetry = Telemetry.from_environment()
    try:
        report = asyncio.run(
            run_suite(
                model=factory,
                model_name=None if model is None else f"{model} at {endpoint}",
                only=tuple(only or ()),
                sqlite_dir=store_dir,
                telemetry=telemetry,
            )
        )
    finally:
        if telemetry is not None:
            telemetry.shutdown()
    write_outputs(report, json_path=json_path, html_path=html_path)
    _summary(console_for_output(), report)
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


def _factory(endpoint: str | None, model: str | None, api_key_env: str) -> ModelFactory | None:
    """The model of each scenario: None (the reference cassettes) or the endpoint's."""
    if endpoint is None:
        if model is not None:
            raise CliError("--model needs --endpoint (without it the reference cassettes run)")
        return None
    if not model:
        raise CliError("--endpoint needs --model, the model name to ask there")
    api_key = os.environ.get(api_key_env)
    if not api_key:
        raise CliError(f"set {api_key_env} to the endpoint's API key (any text for a local server)")
    from handrail.loop.models import OpenAICompatibleClient  # noqa: PLC0415 - loads the SDK

    def make(scenario: str) -> OpenAICompatibleClient:
        del scenario  # every scenario gets a client of its own, closed after it
        return OpenAICompatibleClient(base_url=endpoint, api_key=api_key, model=model)

    return make


def _summary(console: Console, report: EvalReport) -> None:
    passed = sum(1 for s in report.scenarios if s.passed)
    # The model's name and the failures can hold a model's or a report's text: shown
    # escaped, so that no control sequence reaches the terminal.
    lines = [Text(f"model: {shown(str(report.model))}")]
    for scenario in report.scenarios:
        lines.extend(
            Text(f"FAILED {shown(scenario.name)}: {shown(failure)}", style="bold red")
            for failure in scenario.failures
        )
    style = "bold green" if report.passed else "bold red"
    lines.append(Text(f"{passed} of {len(report.scenarios)} scenarios passed", style=style))
    for line in lines:
        console.print(line)


def write_outputs(report: EvalReport, *, json_path: Path | None, html_path: Path | None) -> None:
    """Print the report's table, and write its JSON and HTML where asked."""
    from handrail.eval.html import render_html  # noqa: PLC0415 - not for --help
    from handrail.eval.table import render_table  # noqa: PLC0415 - not for --help

    console = console_for_output()
    console.print(render_table(report))
    if json_path is not None:
        json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        console.print(f"report written to {json_path}", highlight=False, markup=False)
    if html_path is not None:
        html_path.write_text(render_html(report), encoding="utf-8")
        console.print(f"HTML report written to {html_path}", highlight=False, markup=False)
