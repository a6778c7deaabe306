"""The terminal view of a report: one rich table of every layer's metrics.

Seam: built by the eval-output helper (see the contract of issue 20).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

    from handrail.eval.report import EvalReport

__all__ = ["render_table"]


def render_table(report: EvalReport) -> RenderableType:
    """The report as a table: scenarios as columns or rows, metrics by layer, totals."""
    raise NotImplementedError
