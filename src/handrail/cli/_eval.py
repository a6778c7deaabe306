"""`handrail eval`: run the built-in suite or BFCL, show a report, compare two reports.

`run` is the built-in suite (`_eval_run`); `bfcl` scores a cassette's or a model's
answers to BFCL's single-turn questions; `report` shows a saved report and writes its
HTML page; `compare` shows what changed between two saved reports. Each prints the
rich table, writes JSON (`--json`) and the self-contained HTML page (`--html`) when
asked, and exits 1 when expectations failed or something regressed (2 for errors).
The evaluation modules are imported when a command runs, so `--help` loads none.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from handrail.cli._common import (
    CliError,
    HelpCommand,
    HelpGroup,
    console_for_output,
    one_line_errors,
)
from handrail.cli._eval_run import EXIT_FAILED, run, write_outputs

if TYPE_CHECKING:
    from handrail.eval.bfcl import Answerer
    from handrail.eval.report import EvalReport

__all__ = ["eval_app", "write_outputs"]

_NO_KEY: Final = "not-needed"
"""What the SDK sends as the key when no --api-key-env is named (local servers)."""

eval_app = typer.Typer(
    cls=HelpGroup,
    help="Score model output, policy and execution together: the built-in suite, BFCL, compare.",
    no_args_is_help=True,
)
eval_app.command("run", cls=HelpCommand)(run)

JsonOption = Annotated[
    Path | None,
    typer.Option("--json", metavar="PATH", help="Also write the report as JSON here."),
]
HtmlOption = Annotated[
    Path | None,
    typer.Option(
        "--html",
        metavar="PATH",
        help="Also write the report as one self-contained HTML page here (opens offline).",
    ),
]


def _load(path: Path) -> EvalReport:
    import pydantic  # noqa: PLC0415 - not for --help

    from handrail.eval.report import load_report  # noqa: PLC0415 - not for --help

    try:
        return load_report(path)
    except pydantic.ValidationError as exc:
        count = exc.error_count()
        raise CliError(f"{path} is not a report handrail eval wrote ({count} error(s))") from None


def _categories(given: Sequence[str] | None) -> tuple[str, ...]:
    from handrail.eval.bfcl import CATEGORIES  # noqa: PLC0415 - not for --help

    if not given:
        return tuple(CATEGORIES)
    return tuple(part.strip() for item in given for part in item.split(",") if part.strip())


def _api_key(variable: str | None) -> str:
    if variable is None:
        return _NO_KEY
    key = os.environ.get(variable)
    if not key:
        raise CliError(f"--api-key-env names {variable}, which is not set")
    return key


@dataclass(frozen=True, kw_only=True, slots=True)
class _Scoring:
    """What to score, and how, whatever answers it."""

    categories: tuple[str, ...]
    limit: int | None
    min_accuracy: float
    concurrency: int

    async def score(self, answerer: Answerer, *, model: str) -> EvalReport:
        """Score the answers; on a terminal, a progress bar on stderr while it runs."""
        from rich.console import Console  # noqa: PLC0415 - not for --help
        from rich.progress import Progress  # noqa: PLC0415 - not for --help

        from handrail.clock import SystemClock  # noqa: PLC0415 - not for --help
        from handrail.eval.bfcl import run_bfcl  # noqa: PLC0415 - not for --help

        errors = Console(stderr=True)
        with Progress(console=errors, transient=True, disable=not errors.is_terminal) as shown:
            task = shown.add_task("BFCL questions", total=None)
            return await run_bfcl(
                answerer,
                model=model,
                clock=SystemClock(),
                categories=self.categories,
                limit=self.limit,
                min_accuracy=self.min_accuracy,
                concurrency=self.concurrency,
                on_scored=lambda _: shown.advance(task),
            )

    async def ask(self, endpoint: str, *, model: str, key: str, timeout: float) -> EvalReport:
        from handrail.eval.bfcl import ask_model  # noqa: PLC0415 - not for --help

        try:
            from handrail.loop.models import OpenAICompatibleClient  # noqa: PLC0415

            # BFCL's schemas are not written for strict mode: the model sees them as they are.
            client = OpenAICompatibleClient(
                base_url=endpoint, api_key=key, model=model, strict=False
            )
        except ModuleNotFoundError:
            msg = "asking a model needs the openai SDK: pip install 'handrail[models]'"
            raise CliError(msg) from None
        try:
            return await self.score(ask_model(client, timeout=timeout), model=client.name)
        finally:
            await client.aclose()


@eval_app.command("bfcl", cls=HelpCommand)
@one_line_errors
def bfcl(
    *,
    answers: Annotated[
        Path | None,
        typer.Option(
            "--answers",
            metavar="FILE.jsonl",
            help=(
                'A cassette: one line per question, {"id": ..., "calls": [{"name": '
                '..., "arguments": "<JSON text>"}]}, names being BFCL\'s function names.'
            ),
        ),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            metavar="URL",
            help="Ask a model instead: the base URL of an OpenAI-compatible API (…/v1).",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="NAME",
            help="The model to ask at --endpoint (with --answers: its name).",
        ),
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            "--api-key-env",
            metavar="VAR",
            help="The environment variable holding the endpoint's API key (none: no key).",
        ),
    ] = None,
    categories: Annotated[
        list[str] | None,
        typer.Option(
            "--categories",
            "-c",
            metavar="NAMES",
            help="BFCL categories to score, comma-separated or repeated (default: all 13).",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="Only the first N questions of each category."),
    ] = None,
    min_accuracy: Annotated[
        float,
        typer.Option(
            "--min-accuracy",
            min=0.0,
            max=1.0,
            help="A category below this accuracy fails, and the command exits 1.",
        ),
    ] = 0.0,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.001, help="Seconds to wait for each answer.")
    ] = 60.0,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Questions asked at the same time.")
    ] = 4,
    json_path: JsonOption = None,
    html_path: HtmlOption = None,
) -> None:
    """Score answers to BFCL's single-turn questions with Handrail's own checks.

    Each question's functions become Handrail tools; each proposed call goes through
    lookup, JSON syntax and JSON Schema as the gate checks it, then an argument
    matcher following BFCL's documented rules.

    Answers come from a cassette (--answers) or a model (--endpoint and --model). The
    BFCL data is read from the installed bfcl-eval package. One column per category:
    accuracy, correct tool rate, field accuracy, JSON and schema pass rates,
    non-existent tools, calls where none were expected.
    """
    from handrail.eval.bfcl import from_cassette, load_cassette  # noqa: PLC0415 - not for --help

    if (answers is None) == (endpoint is None):
        raise CliError("give either --answers FILE.jsonl or --endpoint URL (with --model)")
    scoring = _Scoring(
        categories=_categories(categories),
        limit=limit,
        min_accuracy=min_accuracy,
        concurrency=concurrency,
    )
    if answers is not None:
        cassette = from_cassette(load_cassette(answers))
        name = model or f"cassette {answers.name}"
        report = asyncio.run(scoring.score(cassette, model=name))
    else:
        if not model:
            raise CliError("--endpoint needs --model")
        key = _api_key(api_key_env)
        report = asyncio.run(scoring.ask(str(endpoint), model=model, key=key, timeout=timeout))
    write_outputs(report, json_path=json_path, html_path=html_path)
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


ReportArgument = Annotated[Path, typer.Argument(help="A report written by handrail eval --json.")]


@eval_app.command("report", cls=HelpCommand)
@one_line_errors
def report(path: ReportArgument, *, html_path: HtmlOption = None) -> None:
    """Show a saved report as a table, and write its HTML page with --html.

    Exits 1 when the report's expectations failed.
    """
    loaded = _load(path)
    write_outputs(loaded, json_path=None, html_path=html_path)
    if not loaded.passed:
        raise typer.Exit(EXIT_FAILED)


@eval_app.command("compare", cls=HelpCommand)
@one_line_errors
def compare(
    before: Annotated[Path, typer.Argument(help="The earlier report (JSON).")],
    after: Annotated[Path, typer.Argument(help="The later report (JSON).")],
    *,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            min=0.0,
            help=(
                "Worsening allowed before it counts: for rates an absolute difference "
                "(0.02 = 2 points), for counts, durations and tokens a fraction of the "
                "earlier value (0.02 = 2%)."
            ),
        ),
    ] = 0.0,
    everything: Annotated[bool, typer.Option("--all", help="Show unchanged metrics too.")] = False,
) -> None:
    """Show what changed between two reports of the same suite, and what regressed.

    Per metric, in the totals and in each scenario both runs have: before, after and
    delta; a change the worse way (by the metric's better direction) beyond the
    tolerance is a regression, and so is a scenario that passed and now fails. Exits
    1 when anything regressed.
    """
    from handrail.eval.compare import compare_reports, render_comparison  # noqa: PLC0415

    comparison = compare_reports(_load(before), _load(after), tolerance=tolerance)
    console_for_output().print(render_comparison(comparison, everything=everything))
    if comparison.regressed:
        raise typer.Exit(EXIT_FAILED)
