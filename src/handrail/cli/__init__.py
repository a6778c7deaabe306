"""The `handrail` command: an application's tools, their definitions, the audit, a demo.

A thin layer over the registry, the adapters and the store: it loads an application,
builds the operator's view principal and prints. Tool lists and exports show only what
`Registry.exposed` gives that principal. It never runs a tool, except in `demo` and in
`reconcile`, which retries a write only when its tool's downstream system proves it
was never executed. `raw` shows people the full raw results kept behind envelope refs;
`runs`, `conversations` and `plans` a tenant's agent runs, chats and plans; `plans
confirm|reject` decide one as a named person (never executing it), and `runs cancel`
ends a run as its user, rejecting its plans. `skills` lists and checks skill folders;
`tasks` lists, shows and cancels a tenant's long tasks. `eval` scores a model, the policy
and execution together on a suite of scenarios or on BFCL.
"""

from __future__ import annotations

import typer

from handrail.cli._audit import audit_app
from handrail.cli._common import CliError, HelpCommand, HelpGroup, load_registry, operator_principal
from handrail.cli._conversations import conversations_app
from handrail.cli._demo import demo
from handrail.cli._eval import eval_app
from handrail.cli._executions import executions_app
from handrail.cli._keys import keys_app
from handrail.cli._mcp import mcp_app
from handrail.cli._mcp_proxy import add_proxy_commands
from handrail.cli._people import people_app
from handrail.cli._plans import plans_app
from handrail.cli._raw import raw_app
from handrail.cli._reconcile import reconcile
from handrail.cli._replay import replay
from handrail.cli._runs import runs_app
from handrail.cli._serve import serve
from handrail.cli._skills import skills_app
from handrail.cli._tasks import tasks_app
from handrail.cli._tools import spec_document, tools_app

__all__ = ["CliError", "app", "load_registry", "main", "operator_principal", "spec_document"]

app = typer.Typer(
    cls=HelpGroup,
    name="handrail",
    help=(
        "Handrail: inspect an application's tools, export their definitions, read the "
        "audit, runs, conversations and plans, confirm or reject plans, cancel runs, "
        "reconcile unknown writes, read raw results, check skill folders, list and cancel tasks."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(tools_app, name="tools")
app.add_typer(audit_app, name="audit")
app.add_typer(executions_app, name="executions")
app.add_typer(raw_app, name="raw")
app.add_typer(runs_app, name="runs")
app.add_typer(conversations_app, name="conversations")
app.add_typer(plans_app, name="plans")
add_proxy_commands(mcp_app)
app.add_typer(mcp_app, name="mcp")
app.add_typer(keys_app, name="keys")
app.add_typer(skills_app, name="skills")
app.add_typer(tasks_app, name="tasks")
app.add_typer(people_app, name="people")
app.add_typer(eval_app, name="eval")
app.command("serve", cls=HelpCommand)(serve)
app.command("demo", cls=HelpCommand)(demo)
app.command("reconcile", cls=HelpCommand)(reconcile)
app.command("replay", cls=HelpCommand)(replay)


def main() -> None:
    """Entry point of the `handrail` command."""
    app()
