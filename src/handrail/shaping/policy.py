"""What a tool declares about its results: the view the model may get of them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from handrail.envelope import Trust
from handrail.errors import ConfigurationError
from handrail.shaping.project import Projection
from handrail.shaping.redact import RedactionPolicy

__all__ = ["Overflow", "RawKeeping", "ResultPolicy"]


class Overflow(StrEnum):
    """What happens to a result over its budget."""

    TRUNCATE = "truncate"
    """Cut to fit, every cut reported with how much was left out."""
    PAGINATE = "paginate"
    """A list result is served a page at a time, with a signed cursor for the next;
    anything else is truncated."""


class RawKeeping(StrEnum):
    """When the full raw result is stored for people (needs a raw store configured)."""

    NEVER = "never"
    WHEN_SHAPED = "when_shaped"
    """Only when the model's view differs from it: projected, redacted or cut."""
    ALWAYS = "always"


@dataclass(frozen=True, kw_only=True, slots=True)
class ResultPolicy:
    """Per-tool result shaping. None means the shaper's default for that setting.

    `max_chars` counts characters of the JSON of `data`; `max_tokens` is measured with
    the shaper's token estimator. `source` labels the data block (default
    `tool:<name>`); `trust` says how far its content may be believed. `keep_raw` says
    when the full result is stored for people, behind the envelope's `ref`; a result
    that is paginated is always stored, since its pages are read from it.
    """

    projection: Projection | None = None
    redaction: RedactionPolicy | None = None
    max_chars: int | None = None
    max_tokens: int | None = None
    overflow: Overflow = Overflow.TRUNCATE
    trust: Trust = Trust.UNTRUSTED
    source: str | None = None
    keep_raw: RawKeeping = RawKeeping.WHEN_SHAPED

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigurationError(f"a result policy's {name} must be positive")
        if self.trust is Trust.HANDRAIL:
            raise ConfigurationError("tool results cannot claim Handrail's own trust level")
