"""The contract every provider adapter keeps, and the values adapters exchange.

An adapter translates one provider's wire format both ways: tool definitions and tool
choice out, tool calls in (whole responses and streams), results back, and whole
transcripts. It keeps provider ids verbatim and never decides exposure or policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Protocol

from handrail.adapters.transcript import Turn
from handrail.calls import ToolCall
from handrail.envelope import Envelope
from handrail.errors import ConfigurationError
from handrail.spec import ToolSpec

__all__ = [
    "Adapter",
    "Definitions",
    "IssueAction",
    "SchemaIssue",
    "StreamAssembler",
    "ToolChoice",
    "ToolChoiceMode",
    "UnsupportedSchemaError",
    "UntranslatableError",
]


class ToolChoiceMode(StrEnum):
    """What the application lets the model do with tools in one request."""

    AUTO = "auto"
    """The model may call tools or answer."""
    NONE = "none"
    """The model must not call tools."""
    REQUIRED = "required"
    """The model must call at least one tool."""
    TOOL = "tool"
    """The model must call this one tool."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolChoice:
    """Handrail's tool choice; each adapter maps it to its provider's field."""

    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    tool: str | None = None
    """The Handrail tool name, exactly when `mode` is TOOL."""

    def __post_init__(self) -> None:
        if (self.mode is ToolChoiceMode.TOOL) != (self.tool is not None):
            raise ConfigurationError("a tool choice names a tool exactly when its mode is TOOL")

    @classmethod
    def forced(cls, tool: str) -> ToolChoice:
        """The model must call `tool`."""
        return cls(mode=ToolChoiceMode.TOOL, tool=tool)


class IssueAction(StrEnum):
    """What an adapter did about a schema feature its provider does not support."""

    REWRITTEN = "rewritten"
    """Changed into an equivalent or looser form the provider accepts; the gate still
    validates against the original schema."""
    REFUSED = "refused"
    """Cannot be sent; the tool's definitions export fails."""
    UNENFORCED = "unenforced"
    """Sent as it is where the provider does not promise to honour it (for example
    OpenAI without strict mode); the gate still enforces it on every call."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SchemaIssue:
    """One schema feature a provider does not support, and what was done about it."""

    tool: str
    path: str
    """Where in the tool's schema, as a JSONPath into the schema document."""
    keyword: str
    action: IssueAction
    detail: str


class UnsupportedSchemaError(ConfigurationError):
    """A tool's schema uses features a provider cannot take and that cannot be rewritten."""

    def __init__(self, provider: str, issues: Sequence[SchemaIssue]) -> None:
        lines = "; ".join(f"{i.tool} {i.path}: {i.keyword} ({i.detail})" for i in issues)
        super().__init__(f"{provider} cannot take these schemas: {lines}")
        self.provider = provider
        self.issues = tuple(issues)


class UntranslatableError(ConfigurationError):
    """A part that has no faithful form in the target format, or unreadable input.

    Raised for a transcript part a format cannot carry, and for a response or message
    that cannot be read as the adapter's format at all.
    """


@dataclass(frozen=True, kw_only=True, slots=True)
class Definitions:
    """Tool definitions for one request, with what was rewritten and how to undo it.

    `payload` goes into the provider request as it is. `issues` reports every rewrite
    (never silent). `restore` maps a Handrail tool name to adapter-specific data that
    `parse_calls` uses to turn a call made against the rewritten schema back into
    arguments for the original one (for example, dropping the nulls that OpenAI's
    strict mode makes the model send for optional fields).
    """

    provider: str
    payload: list[dict[str, Any]]
    issues: tuple[SchemaIssue, ...] = ()
    restore: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))


class StreamAssembler(Protocol):
    """Assembles the tool calls of one streamed response, event by event.

    `feed` takes the provider's stream events (SDK objects or plain dicts) in order.
    `finish` returns every call the stream proposed, in order: complete ones as they
    are, and cut-off ones (finish reason length / max_tokens, or JSON that never
    closed) with `ToolCall.defect` set, so that the gate refuses them and never runs a
    partial call. A fragment is never added twice. An event `feed` cannot read (text,
    another format's events, a whole response) raises there, UntranslatableError for
    the OpenAI and Gemini assemblers, so that a stream is never read as "no calls"
    by mistake.
    """

    def feed(self, event: object) -> None:
        """Take the next stream event."""
        ...

    def finish(self) -> list[ToolCall]:
        """The calls of the stream, once it has ended."""
        ...


class Adapter(Protocol):
    """One provider wire format, both ways. Implementations are named for it."""

    provider: str

    def tool_definitions(self, specs: Sequence[ToolSpec]) -> Definitions:
        """Definitions for specs already chosen by `Registry.exposed`."""
        ...

    def tool_choice(self, choice: ToolChoice) -> object:
        """The provider's value for the request's tool-choice field."""
        ...

    def parse_calls(
        self,
        response: object,
        *,
        definitions: Definitions | None = None,
    ) -> list[ToolCall]:
        """The tool calls of a response: an SDK object, a plain dict or its JSON text.

        Adapters may take more keywords; Gemini, whose calls carry no ids, takes the
        conversation `turn` so that the ids it assigns are stable and never collide.
        """
        ...

    def stream(self, *, definitions: Definitions | None = None) -> StreamAssembler:
        """A new assembler for one streamed response."""
        ...

    def render_results(
        self,
        calls: Sequence[ToolCall],
        envelopes: Sequence[Envelope],
    ) -> list[dict[str, Any]]:
        """The messages (or items, or contents) that carry these results back.

        Each envelope goes in its own data block (`handrail.shaping.marking`), labelled
        with its source and trust level, so the model reads it as data only.
        """
        ...

    def to_wire(self, transcript: Sequence[Turn]) -> list[dict[str, Any]]:
        """A whole conversation in this format."""
        ...

    def from_wire(self, messages: Sequence[object]) -> list[Turn]:
        """A conversation in this format, back to Handrail's neutral turns."""
        ...
