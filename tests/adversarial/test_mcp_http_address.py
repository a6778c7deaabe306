"""`--http` never reads an unbracketed IPv6 address as another host and port.

`::1` (loopback, no port) read as host `::` (every interface) and port 1, and
`::1:8000` as loopback only by luck of where the last colon is. An IPv6 host is
written in brackets, `[::1]:8000`; anything else with colons in the host is refused.
"""

from __future__ import annotations

import pytest

from handrail.cli._common import CliError
from handrail.cli._mcp_http import parse_address


@pytest.mark.parametrize("text", ["::1", "::1:8000", "fe80::1:443", "[::1", "::]:80"])
def test_an_unbracketed_ipv6_host_is_refused(text: str) -> None:
    with pytest.raises(CliError, match="HOST:PORT"):
        parse_address(text)


def test_a_bracketed_ipv6_host_is_read_as_written() -> None:
    assert parse_address("[::1]:8000") == ("::1", 8000)
    assert parse_address("[::]:8000") == ("::", 8000)
