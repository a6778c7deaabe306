"""Over MCP, a tool leaves `tools/list` on its deprecation day, with no registry change.

GatedServer remembers each principal's exposure until the registry changes; the day
is the registry's clock's, which moves without any registration. A list taken the
evening before must not be served after midnight: the tool is refused then, so a
list that still offered it would invite calls that can only fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from _integ_catalogue import ALICE, CORE, build_registry, write_library
from _toolset_tools import error_code
from handrail import Handrail, RiskLevel, Tool
from handrail.app import MEMORY
from handrail.clock import FixedClock
from handrail.mcp import GatedServer
from handrail.spec import Deprecation
from mcp import Client

pytestmark = pytest.mark.anyio

OLD = "assets.old_status"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(datetime(2026, 5, 31, 23, 0, tzinfo=UTC))


@pytest.fixture
def app(tmp_path: Path, clock: FixedClock) -> Iterator[Handrail]:
    registry, _ = build_registry(write_library(tmp_path / "skills"), clock=clock)
    registry.register(
        Tool.from_json_schema(
            name=OLD,
            description="The monitoring state of an asset, from the old monitor.",
            input_schema={"type": "object", "properties": {}},
            fn=lambda arguments, ctx: {"state": "up"},
            risk=RiskLevel.L1_INTERNAL_READ,
            deprecation=Deprecation(after=date(2026, 6, 1), replacement="asset_status"),
        )
    )
    with Handrail.open(MEMORY, registry=registry, clock=clock) as opened:
        yield opened


async def test_a_tool_leaves_the_list_at_midnight_without_a_registry_change(
    app: Handrail, clock: FixedClock
) -> None:
    server = GatedServer(app, principal=lambda: ALICE)
    async with Client(server.lowlevel, mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == CORE | {OLD}
        assert "Deprecated: refused from 2026-06-01" in (listed[OLD].description or "")
        clock.advance(2 * 3600)
        assert {t.name for t in (await client.list_tools()).tools} == CORE
        assert error_code(await client.call_tool(OLD, {})) == "UNKNOWN_TOOL"
    server.close()
