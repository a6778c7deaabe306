"""One proposed tool call, provider-neutral, with the provider's id kept verbatim.

Adapters build ToolCalls from wire formats; the gate never guesses an id from order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from handrail.text import is_unicode

__all__ = ["ToolCall"]

_NOT_TEXT = "the call id or tool name holds a lone surrogate, which is not Unicode text"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """A model's proposal: which tool, with which (still unvalidated) arguments.

    `arguments` is whatever the provider sent: a JSON text (OpenAI), raw bytes, or an
    already decoded object (Anthropic `input`). Nothing in it is trusted.

    `defect` is set by an adapter that knows the call cannot be run as proposed (a
    stream cut off mid-arguments, an id reused from an earlier turn); the gate refuses
    such a call with INVALID_ARGUMENTS at stage 1 and never runs it.

    An id or name with a lone surrogate (legal in JSON text, not encodable as UTF-8)
    makes the call defective here, whoever built it; both are kept exactly as sent, so
    the envelope still answers this id.

    `raw` is the provider's own object, for debugging only; like `ModelReply.raw`, it
    takes no part in equality (a streamed call equals the same call read whole).
    """

    id: str
    name: str
    arguments: str | bytes | Mapping[str, object] | None
    provider: str = "unknown"
    raw: object = field(default=None, compare=False, repr=False)
    defect: str | None = None

    def __post_init__(self) -> None:
        if (
            self.defect is None
            # ASCII first: it needs no call, and nearly every id and name is ASCII.
            and not (self.id.isascii() and self.name.isascii())
            and not (is_unicode(self.id) and is_unicode(self.name))
        ):
            object.__setattr__(self, "defect", _NOT_TEXT)
