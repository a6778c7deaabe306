"""`handrail people`: the console's people (placeholder; the console part fills it)."""

from __future__ import annotations

import typer

from handrail.cli._common import HelpGroup

__all__ = ["people_app"]

people_app = typer.Typer(
    cls=HelpGroup,
    help="People who log in to the console: add one, list, disable, unlock, set a password.",
    no_args_is_help=True,
)
