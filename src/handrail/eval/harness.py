"""Running a suite of scenarios through the real agent loop, gate and stores.

Seam: built by the eval-harness helper (see the contract of issue 20).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from handrail.eval.report import EvalReport
    from handrail.loop.models import ModelClient

__all__ = ["ModelFactory", "run_suite"]

ModelFactory = Callable[[str], "ModelClient"]
"""Given a scenario's name, the model client to drive it (None in `run_suite`: each
scenario's own scripted model, clearly named as such)."""


async def run_suite(
    suite: str = "builtin",
    *,
    model: ModelFactory | None = None,
    model_name: str | None = None,
    only: tuple[str, ...] = (),
) -> EvalReport:
    """Run the scenarios of `suite` (those named in `only`, or all) and report them."""
    raise NotImplementedError
