"""Spans that tell a failure from a refusal, for every part that records to a Telemetry.

Owns the one way a span is marked failed (status ERROR and `error.type`, named by a
code or an exception's type, never by a message that may quote data) and the current
span that does so for whatever escapes it. Imported only once a Telemetry is in use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from handrail.errors import AccessRefusedError
from handrail.telemetry import attributes as attr

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer
    from opentelemetry.util.types import AttributeValue

__all__ = ["failed", "traced"]


def failed(span: Span, error_type: str) -> None:
    """Mark `span` failed: status ERROR and `error.type`."""
    span.set_attribute(attr.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, error_type))


@contextmanager
def traced(
    tracer: Tracer,
    name: str,
    attributes: Mapping[str, AttributeValue],
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    failure: Callable[[BaseException], str] = lambda exc: type(exc).__name__,
) -> Iterator[Span]:
    """A current span that tells a refusal (its code set, status unset) from a failure.

    A refused request of a person (AccessRefusedError) sets the error code attribute;
    any other exception marks the span ERROR as `failure` names it (by default its
    type), never with its message.
    """
    with tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except AccessRefusedError as refused:
            span.set_attribute(attr.HANDRAIL_ERROR_CODE, refused.code.value)
            raise
        except BaseException as exc:
            failed(span, failure(exc))
            raise
