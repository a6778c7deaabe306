"""One proposed tool call, provider-neutral, with the provider's id kept verbatim.

Adapters build ToolCalls from wire formats; the gate never guesses an id from order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ToolCall"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """A model's proposal: which tool, with which (still unvalidated) arguments.

    `arguments` is whatever the provider sent: a JSON text (OpenAI), raw bytes, or an
    already decoded object (Anthropic `input`). Nothing in it is trusted.

    `defect` is set by an adapter that knows the call cannot be run as proposed (a
    stream cut off mid-arguments, an id reused from an earlier turn); the gate refuses
    such a call with INVALID_ARGUMENTS at stage 1 and never runs it.
    """

    id: str
    name: str
    arguments: str | bytes | Mapping[str, object] | None
    provider: str = "unknown"
    raw: object = None
    defect: str | None = None
