"""Which host names are this machine's own: the one loopback test the listeners share.

The service and the MCP server over HTTP both decide by it what Host headers to
accept and whether to warn about credentials sent off this machine in the clear.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether `host` is `localhost` or a loopback address (IPv4 or IPv6, unbracketed)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
