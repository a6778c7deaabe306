"""The HTML report: one self-contained page with charts that needs no network.

Seam: built by the eval-output helper (see the contract of issue 20).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from handrail.eval.report import EvalReport

__all__ = ["render_html"]


def render_html(report: EvalReport) -> str:
    """The whole page: metric bars per scenario, latency distribution per tool, totals."""
    raise NotImplementedError
