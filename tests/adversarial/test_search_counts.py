"""`search_tools`' counts tell nothing of tools the caller may not use.

`matches` and `omitted` count only tools the search may return to this principal
under the run's request: another tenant's, a disabled, a permission-lacking tool or
one outside the active skill matches the query as well as the others, yet moves
neither count, whatever the limit.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from _integ_catalogue import (
    ALICE,
    LOOKUP,
    MALLORY,
    OTHER_TENANT,
    REFUND,
    build_registry,
    write_library,
)
from handrail import Gate, Principal, Registry, ToolCall
from handrail.declare.exposure import ExposureRequest

pytestmark = pytest.mark.anyio


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    built, _ = build_registry(write_library(tmp_path / "skills"))
    return built


async def _search(
    registry: Registry,
    principal: Principal,
    query: str,
    limit: int,
    request: ExposureRequest | None = None,
) -> dict[str, Any]:
    exposure = registry.exposure(principal, request or ExposureRequest())
    arguments = json.dumps({"query": query, "limit": limit})
    envelope = await Gate(registry).handle(
        ToolCall(id="s", name="search_tools", arguments=arguments), principal, exposure=exposure
    )
    assert envelope.error is None, envelope
    assert isinstance(envelope.data, dict)
    return envelope.data


@pytest.mark.parametrize(
    ("principal", "request_", "found"),
    [
        (ALICE, None, [REFUND, LOOKUP]),
        (MALLORY, None, [REFUND, LOOKUP, OTHER_TENANT]),
        (ALICE, ExposureRequest(narrowed_to=frozenset({LOOKUP, "search_tools"})), [LOOKUP]),
        (dataclasses.replace(ALICE, permissions=frozenset({"billing.read"})), None, [LOOKUP]),
    ],
)
async def test_counts_are_of_returnable_tools_only(
    registry: Registry,
    principal: Principal,
    request_: ExposureRequest | None,
    found: list[str],
) -> None:
    full = await _search(registry, principal, "invoice purge ledger admin export", 20, request_)
    assert sorted(t["name"] for t in full["tools"]) == sorted(found)
    assert (full["matches"], full["omitted"]) == (len(found), 0)
    one = await _search(registry, principal, "invoice purge ledger admin export", 1, request_)
    assert (one["matches"], one["omitted"]) == (len(found), len(found) - 1)


async def test_a_query_only_barred_tools_match_finds_nothing_and_counts_nothing(
    registry: Registry,
) -> None:
    for query in ("purge archive", "ledger admins", "export tenant two"):
        data = await _search(registry, ALICE, query, 20)
        assert (data["tools"], data["matches"], data["omitted"]) == ([], 0, 0)
