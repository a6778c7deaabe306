"""`handrail eval run`: the built-in suite through the real loop, gate and stores.

Seam: built by the eval-harness helper (see the contract of issue 20).
"""

from __future__ import annotations

from handrail.cli._common import CliError

__all__ = ["run"]


def run() -> None:
    """Run the built-in evaluation suite and report every layer's metrics."""
    raise CliError("not built yet")
