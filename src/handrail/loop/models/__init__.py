"""Model clients behind one protocol: what the agent loop asks a model, and what it hears.

`ModelClient.complete` takes a provider-neutral `ModelRequest` (transcript, tools, tool
choice) and returns a `ModelReply` (calls with ids verbatim, text, usage); a
`StreamingModelClient` can also `stream` it: `TextDelta`s, then the `ModelReply`. Real clients
go through the official SDKs and an adapter, and all of them stream; the scripted client
replays a cassette. A client never runs a call, retries on its own, or decides when a run
ends.

One module per client: `_openai` (OpenAI-compatible Chat Completions), `_openai_responses`
(the OpenAI Responses API), `_anthropic`, `_scripted` (with cassettes), over `_protocol`
(requests, replies, the protocol) and `_sdk` (the SDK boundary the real clients share).
Everything public is importable from here.

Errors, all for operators and never shown to the model:

    HandrailError
    └── ModelError            the model could not be asked or its answer not read;
                              `code` (RATE_LIMITED, TRANSIENT, TIMEOUT, FAILED_FINAL),
                              `retryable`, `status`, `retry_after`
    ConfigurationError
    └── CassetteError         a cassette that cannot be read back as replies
    ScriptExhaustedError      (from handrail.testing) the script has no more replies
"""

from __future__ import annotations

from handrail.loop.models._anthropic import AnthropicClient
from handrail.loop.models._openai import OpenAICompatibleClient
from handrail.loop.models._openai_responses import OpenAIResponsesClient
from handrail.loop.models._protocol import (
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    StreamingModelClient,
    TextDelta,
    Usage,
)
from handrail.loop.models._scripted import (
    SCRIPTED_MODEL,
    CassetteError,
    ScriptedModelClient,
    ScriptedStep,
    cassette_items,
    load_cassette,
    parse_cassette,
    record_cassette,
)
from handrail.testing import ScriptExhaustedError

__all__ = [
    "SCRIPTED_MODEL",
    "AnthropicClient",
    "CassetteError",
    "ModelClient",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "OpenAICompatibleClient",
    "OpenAIResponsesClient",
    "ScriptExhaustedError",
    "ScriptedModelClient",
    "ScriptedStep",
    "StreamingModelClient",
    "TextDelta",
    "Usage",
    "cassette_items",
    "load_cassette",
    "parse_cassette",
    "record_cassette",
]
