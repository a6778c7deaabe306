"""One principal cannot take every `subscriptions/listen` stream of the server.

The SDK bounds listen streams for the whole server (1024) and each stays open as long
as its client likes, so one principal could hold them all and every other client's
listen was refused. Now each principal holds at most LISTENS_PER_PRINCIPAL; the next
is refused, and another principal still opens one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AsyncExitStack
from contextvars import ContextVar

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from _mcp_counting import tools
from handrail import Handrail, Principal, Registry
from handrail.app import MEMORY
from handrail.mcp import GatedServer
from handrail.mcp._guards import LISTENS_PER_PRINCIPAL
from mcp import Client

pytestmark = pytest.mark.anyio

WAIT = 30.0
ALICE = Principal(user_id="alice", tenant_id="t1")
BOB = Principal(user_id="bob", tenant_id="t2")


@pytest.fixture
def app() -> Iterator[Handrail]:
    registry = Registry()
    for made in tools(lambda name: None):
        registry.register(made)
    with Handrail.open(MEMORY, registry=registry) as opened:
        yield opened


async def test_a_principal_holds_a_bounded_number_of_listen_streams(app: Handrail) -> None:
    caller: ContextVar[Principal] = ContextVar("caller", default=ALICE)
    server = GatedServer(app, principal=caller.get)
    try:
        with anyio.fail_after(WAIT):
            async with Client(server.lowlevel, mode="auto") as client, AsyncExitStack() as held:
                for _ in range(LISTENS_PER_PRINCIPAL):
                    await held.enter_async_context(client.listen(tools_list_changed=True))
                with pytest.raises(MCPError, match="Subscription limit"):
                    async with client.listen(tools_list_changed=True):
                        pass
                caller.set(BOB)  # this task's next requests are Bob's
                async with client.listen(tools_list_changed=True) as bobs:
                    assert bobs is not None
    finally:
        server.close()
