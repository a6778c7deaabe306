"""The built-in suite: the seeds' sample list as scenarios over the evaluation shop.

Complete and missing fields, two customers with one name, a resource without
permission, direct and indirect prompt injection, a duplicate submit, a write committed
whose answer is lost, a downstream that fails for sure, a resource changed after
confirmation, parallel reads with a dependent call, a "no" that must be honoured and a
planted secret. Each scenario's reference cassette is played by the scripted model
(never a real model); where a scenario is about an attack, the cassette plays a model
that falls for it, so that what Handrail does about it is measured.
"""

from __future__ import annotations

from handrail.eval._scenario import Scenario
from handrail.eval.suite._fields import complete_fields, missing_fields, same_name
from handrail.eval.suite._reads import parallel_reads, planted_secret
from handrail.eval.suite._safety import (
    direct_injection,
    indirect_injection,
    no_permission,
    refusal_honoured,
)
from handrail.eval.suite._writes import (
    downstream_fails,
    duplicate_submit,
    lost_answer,
    version_changed,
)

__all__ = ["SEED_SAMPLES", "builtin_suite"]

SEED_SAMPLES = (
    "complete fields",
    "missing fields",
    "same-name resources need clarification",
    "resource without permission",
    "direct prompt injection",
    "indirect prompt injection",
    "duplicate submit",
    "write committed, answer lost",
    "downstream fails for sure",
    "resource version changed after confirmation",
    "parallel reads with a dependent call",
    "a no that must be honoured",
    "planted secret",
)
"""The seeds' sample list (and the two additions of the issue); each scenario names its own."""


def builtin_suite() -> tuple[Scenario, ...]:
    """Every built-in scenario, in the order reports show them."""
    return (
        complete_fields(),
        missing_fields(),
        same_name(),
        no_permission(),
        direct_injection(),
        indirect_injection(),
        duplicate_submit(),
        lost_answer(),
        downstream_fails(),
        version_changed(),
        parallel_reads(),
        refusal_honoured(),
        planted_secret(),
    )
