"""Stage 2, JSON Schema: the arguments checked against the tool's schema, then bound.

Field errors come back as `{json_path: message}` (INVALID_ARGUMENTS, repairable by the
model); a trusted parameter the model supplied is refused here too. A whole-number
float where the schema says integer reaches the tool as an int. Never authorizes or
executes anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handrail.errors import ErrorCode, Refusal
from handrail.paths import json_path

if TYPE_CHECKING:
    from handrail.declare.definition import BoundArguments, Tool


__all__ = ["validate_arguments"]


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> BoundArguments:
    """Stage 2: check the arguments against the tool's schema; build typed arguments.

    A whole-number float where the schema says integer reaches the tool as an int.
    """
    # A trusted parameter is filled from the Principal; a model that supplies one is
    # refused, even where a raw schema would let an unknown property through.
    errors, checked = tool.check_arguments(arguments)
    for name in tool.spec.trusted:
        if name in arguments:
            errors.setdefault(json_path([name]), "is not allowed")
    if errors:
        raise Refusal(
            ErrorCode.INVALID_ARGUMENTS,
            "The arguments do not match the tool's schema; correct the listed fields.",
            stage="schema",
            retryable=True,
            field_errors=errors,
        )
    return tool.bind(checked)
