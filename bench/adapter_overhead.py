"""Parse-plus-render overhead of each provider adapter, against json.loads of the same text.

For each wire format: a documented-style response carrying one tool call, as JSON text.
Measured per call: `adapter.parse_calls(text)` plus `adapter.render_results(calls,
[envelope])`; the baseline is `json.loads(text)` of the same text, in the same run.
Rounds are interleaved (order rotated each round) and medians are reported, with the
median of the per-round ratios. Nothing here asserts a time.

    .venv/bin/python bench/adapter_overhead.py [--rounds 15] [--calls 5000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from handrail import Envelope, Status
from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import Adapter
from handrail.adapters.gemini import GeminiAdapter
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter

WIRE = "bookstore__check_inventory"
ARGS = {"isbn": "9780141439518", "shelf": "A-12"}

RESPONSES: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": WIRE, "arguments": json.dumps(ARGS)},
                        },
                    ],
                },
            },
        ],
    },
    "openai-responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-test",
        "status": "completed",
        "output": [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": WIRE,
                "arguments": json.dumps(ARGS),
                "status": "completed",
            },
        ],
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "stop_reason": "tool_use",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": WIRE, "input": ARGS}],
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
    "gemini": {
        "responseId": "resp-1",
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"name": WIRE, "args": ARGS}}],
                },
                "finishReason": "STOP",
            },
        ],
    },
}

ADAPTERS: dict[str, Callable[[], Adapter]] = {
    "openai-chat": lambda: OpenAIChatAdapter(strict=False),
    "openai-responses": lambda: OpenAIResponsesAdapter(strict=False),
    "anthropic": lambda: AnthropicAdapter(strict=False),
    "gemini": GeminiAdapter,
}


def _envelope(call_id: str) -> Envelope:
    return Envelope(
        call_id=call_id,
        tool="bookstore.check_inventory",
        status=Status.OK,
        summary="bookstore.check_inventory returned a result.",
        data={"isbn": ARGS["isbn"], "on_hand": 4},
        schema_version="sha256:0",
    )


def _round(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1000


def measure(rounds: int, calls: int) -> dict[str, dict[str, float]]:
    """Median µs/call of parse+render and of json.loads, and their ratio, per format."""
    paths: dict[str, Callable[[], object]] = {}
    for name, response in RESPONSES.items():
        text = json.dumps(response)
        adapter = ADAPTERS[name]()
        parsed = adapter.parse_calls(text)
        assert [(c.id, c.name) for c in parsed] == [(parsed[0].id, "bookstore.check_inventory")]
        envelope = _envelope(parsed[0].id)

        def both(
            adapter: Adapter = adapter, text: str = text, envelope: Envelope = envelope
        ) -> None:
            calls_ = adapter.parse_calls(text)
            adapter.render_results(calls_, [envelope])

        paths[f"{name}:adapter"] = both
        paths[f"{name}:json.loads"] = lambda text=text: json.loads(text)
    names = list(paths)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            samples[n].append(_round(paths[n], calls))
    out: dict[str, dict[str, float]] = {}
    for name in RESPONSES:
        adapter_us = samples[f"{name}:adapter"]
        loads_us = samples[f"{name}:json.loads"]
        out[name] = {
            "adapter_us": statistics.median(adapter_us),
            "json_loads_us": statistics.median(loads_us),
            "ratio": statistics.median(a / b for a, b in zip(adapter_us, loads_us, strict=True)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    """Run, print a table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--json", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    results = measure(args.rounds, args.calls)
    print(f"{args.rounds} rounds x {args.calls} calls per path, interleaved; medians")
    print(f"{'format':18} {'parse+render µs':>16} {'json.loads µs':>14} {'ratio':>7}")
    for name, row in results.items():
        print(
            f"{name:18} {row['adapter_us']:16.2f} {row['json_loads_us']:14.2f} {row['ratio']:7.2f}",
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
