"""Spans and metrics of the agent loop: `invoke_agent` per entry point, `chat {model}` per turn.

Owns what `AgentLoop` records to a `Telemetry`, in the GenAI conventions' terms: an
`invoke_agent` span around `run`, `resume`, `take_over` and `replay` (the current span
while they run, so the gate's `execute_tool` spans and a resumed plan's nest under it),
a `chat {model}` client span per model turn with its token usage, and the metrics
`gen_ai.client.token.usage` (by token type), `gen_ai.client.operation.duration` (on the
injected clock) and `handrail.budget.stops` (by reason; a replay's stops are not
counted, nothing stopped). Loaded only once a Telemetry is given; never records the
transcript, a prompt or a reply's text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from handrail.loop._agent_record import RunStatus
from handrail.loop._outcome import RunOutcome
from handrail.loop.models import ModelError
from handrail.telemetry import attributes as attr
from handrail.telemetry.spans import failed, traced

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from handrail.clock import Clock
    from handrail.loop.models import ModelReply
    from handrail.telemetry import Telemetry

__all__ = ["LoopTelemetry"]

R = TypeVar("R")

_INVOKE_AGENT = "invoke_agent"
_CHAT = "chat"
# The providers of Handrail's own clients, by the prefix of their `name`.
_PROVIDERS = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}


class LoopTelemetry:
    """The agent loop's spans and metrics over one Telemetry; durations on `clock`."""

    def __init__(self, telemetry: Telemetry, clock: Clock) -> None:
        self._telemetry = telemetry
        self._tracer = telemetry.tracer
        self._clock = clock

    async def invoke(
        self,
        operation: str,
        run_id: str | None,
        conversation_id: str | None,
        run: Callable[[], Awaitable[R]],
    ) -> R:
        """`run()`, one entry point of the loop, under an `invoke_agent` span.

        The span says how the run stands after it (status, error, budget); a refused
        request (RunRefusedError, WriteRefusedError) only sets its code.
        """
        attributes: dict[str, AttributeValue] = {
            attr.GEN_AI_OPERATION_NAME: _INVOKE_AGENT,
            attr.HANDRAIL_RUN_OPERATION: operation,
        }
        if run_id is not None:
            attributes[attr.HANDRAIL_RUN_ID] = run_id
        if conversation_id is not None:
            attributes[attr.GEN_AI_CONVERSATION_ID] = conversation_id
        with traced(self._tracer, _INVOKE_AGENT, attributes) as span:
            result = await run()
            if isinstance(result, RunOutcome):  # a replay's report tells nothing more
                self._ended(span, result)
            return result

    def _ended(self, span: Span, outcome: RunOutcome) -> None:
        span.set_attribute(attr.HANDRAIL_RUN_ID, outcome.run_id)
        span.set_attribute(attr.HANDRAIL_RUN_STATUS, outcome.status.value)
        if outcome.trip is not None:
            reason = outcome.trip.reason.value
            span.set_attribute(attr.HANDRAIL_BUDGET_REASON, reason)
            self._telemetry.budget_stops.add(1, {attr.HANDRAIL_BUDGET_REASON: reason})
        if outcome.status is RunStatus.FAILED and outcome.error is not None:
            span.set_attribute(attr.HANDRAIL_ERROR_CODE, outcome.error)
            failed(span, outcome.error)

    async def chat(
        self, model: str, conversation: str, reply: Callable[[], Awaitable[ModelReply]]
    ) -> ModelReply:
        """`reply()`, one model turn of client `model`, under a `chat {model}` span.

        Records its duration and token usage. The run's `invoke_agent` span, current
        while the loop asks the model, learns the conversation's id here.
        """
        provider, requested = _model_names(model)
        labels: dict[str, AttributeValue] = {
            attr.GEN_AI_OPERATION_NAME: _CHAT,
            attr.GEN_AI_REQUEST_MODEL: requested,
        }
        if provider is not None:
            labels[attr.GEN_AI_PROVIDER_NAME] = provider
        trace.get_current_span().set_attribute(attr.GEN_AI_CONVERSATION_ID, conversation)
        attributes = {**labels, attr.GEN_AI_CONVERSATION_ID: conversation}
        started = self._clock.monotonic()
        try:
            with traced(
                self._tracer,
                f"{_CHAT} {requested}",
                attributes,
                kind=SpanKind.CLIENT,
                failure=_model_failure,
            ) as span:
                answer = await reply()
                _answered(span, answer)
        except BaseException as exc:
            took = {**labels, attr.ERROR_TYPE: _model_failure(exc)}
            self._telemetry.model_duration.record(self._since(started), took)
            raise
        labels[attr.GEN_AI_RESPONSE_MODEL] = answer.model
        self._telemetry.model_duration.record(self._since(started), labels)
        usage = answer.usage
        for kind, tokens in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            self._telemetry.token_usage.record(tokens, {**labels, attr.GEN_AI_TOKEN_TYPE: kind})
        return answer

    def _since(self, started: float) -> float:
        return max(0.0, self._clock.monotonic() - started)


def _answered(span: Span, answer: ModelReply) -> None:
    """What a model turn's span says of the reply: model, usage, finish reason."""
    span.set_attribute(attr.GEN_AI_RESPONSE_MODEL, answer.model)
    span.set_attribute(attr.GEN_AI_USAGE_INPUT_TOKENS, answer.usage.input_tokens)
    span.set_attribute(attr.GEN_AI_USAGE_OUTPUT_TOKENS, answer.usage.output_tokens)
    if answer.finish_reason is not None:
        span.set_attribute(attr.GEN_AI_RESPONSE_FINISH_REASONS, (answer.finish_reason,))


def _model_names(name: str) -> tuple[str | None, str]:
    """The provider and the model of a client named `prefix/model`, else None and `name`."""
    prefix, slash, model = name.partition("/")
    if not slash or not model:
        return None, name
    return _PROVIDERS.get(prefix, prefix), model


def _model_failure(exc: BaseException) -> str:
    """A model error by its code (TIMEOUT, RATE_LIMITED, ...), anything else by its type."""
    return exc.code.value if isinstance(exc, ModelError) else type(exc).__name__
