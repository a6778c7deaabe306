"""`handrail eval`: run the built-in suite or BFCL, and compare two reports.

Seam: the commands are built by the eval helpers (see the contract of issue 20).
"""

from __future__ import annotations

import typer

from handrail.cli._common import HelpGroup

__all__ = ["eval_app"]

eval_app = typer.Typer(
    cls=HelpGroup,
    help="Score model output, policy and execution together: the built-in suite, BFCL, compare.",
    no_args_is_help=True,
)
