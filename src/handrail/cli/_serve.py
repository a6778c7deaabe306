"""`handrail serve --config handrail.toml`: the HTTP gateway and console (placeholder)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from handrail.cli._common import CliError, one_line_errors

__all__ = ["serve"]


@one_line_errors
def serve(
    *,
    config: Annotated[
        Path, typer.Option("--config", metavar="FILE", help="The service's handrail.toml.")
    ] = Path("handrail.toml"),
) -> None:
    """Serve the HTTP API and the console of the application the config names."""
    raise CliError(f"serve is not built yet ({config})")
