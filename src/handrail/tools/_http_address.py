"""Which network addresses `http_fetch` may connect to: public ones only, unless allowed.

Owns the verdict on one resolved address. It looks through IPv6 forms that reach or
embed an IPv4 address (mapped, NAT64, compatible, 6to4, Teredo), and checks against
explicit lists of special-purpose networks as well as `ipaddress` properties, so the
verdict does not change with the Python version. Cloud metadata, link-local,
unspecified and multicast addresses can never be allowed, not even by an allowance.
It never resolves names and never connects.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from handrail.errors import ConfigurationError

__all__ = [
    "AddressAllowance",
    "BlockReason",
    "IPAddress",
    "address_block",
    "parse_address",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_PORT = 65_535


class BlockReason(StrEnum):
    """Why a destination was refused; for tests and operators, never shown to the model."""

    SCHEME = "scheme"
    DOMAIN = "domain"
    """The host name is not on the allowlist."""
    IP_LITERAL = "ip_literal"
    """The URL names an IP address that is not on the allowlist."""
    PORT = "port"
    NON_PUBLIC = "non_public"
    """A private, loopback, shared, reserved or documentation address."""
    EMBEDDED = "embedded"
    """An IPv6 form that tunnels to a non-public IPv4 address (6to4, Teredo, compatible)."""
    NEVER = "never"
    """Metadata, link-local, unspecified, multicast or broadcast: never allowable."""
    REDIRECT = "redirect"
    """A redirect to a URL that is not valid."""


def _networks(*texts: str) -> tuple[_Network, ...]:
    return tuple(ipaddress.ip_network(text) for text in texts)


# Never allowed, whatever the configuration says: what an SSRF is usually after.
_NEVER = _networks(
    "0.0.0.0/8",  # "this network": 0.0.0.0 reaches the local host on Linux
    "169.254.0.0/16",  # link-local, with the metadata services of most clouds
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "168.63.129.16/32",  # Azure WireServer
    "192.0.0.192/32",  # Oracle Cloud metadata
    "224.0.0.0/4",  # multicast
    "255.255.255.255/32",  # broadcast
    "::/128",  # unspecified
    "fe80::/10",  # link-local
    "fd00:ec2::/32",  # AWS metadata, DNS and time over IPv6
    "ff00::/8",  # multicast
)

# Not public, but an AddressAllowance may open them (a test server, an intranet host).
_NON_PUBLIC = _networks(
    "10.0.0.0/8",
    "100.64.0.0/10",  # shared address space (carrier-grade NAT)
    "127.0.0.0/8",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.31.196.0/24",
    "192.52.193.0/24",
    "192.88.99.0/24",  # the old 6to4 relay anycast
    "192.168.0.0/16",
    "192.175.48.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "240.0.0.0/4",
    "::/96",  # IPv4-compatible (deprecated), with ::1
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
    "64:ff9b:1::/48",  # local-use NAT64
    "100::/64",  # discard-only
    "2001::/23",  # IETF protocol assignments, with Teredo (2001::/32)
    "2001:db8::/32",  # documentation
    "3fff::/20",  # documentation
    "5f00::/16",  # segment routing
    "fc00::/7",  # unique local
    "fec0::/10",  # site-local (deprecated)
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")


def parse_address(text: str) -> IPAddress:
    """An address from a resolver's text; ValueError when it is not one."""
    return ipaddress.ip_address(text)


def _unwrap(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 form reaches directly (mapped or NAT64), else itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return address


def _embedded(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form tunnels towards (6to4, Teredo, compatible, SIIT)."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _TRANSLATED or (address in _COMPATIBLE and not address.is_loopback):
        # `::` is never allowed anyway; `::1` is the loopback, not a compatible form.
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def _never(address: IPAddress) -> bool:
    return address.is_multicast or address.is_link_local or any(address in net for net in _NEVER)


def _public(address: IPAddress) -> bool:
    if any(address in net for net in _NON_PUBLIC):
        return False
    return address.is_global and not (
        address.is_private
        or address.is_loopback
        or address.is_reserved
        or address.is_unspecified
        or address.is_multicast
        or address.is_link_local
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class AddressAllowance:
    """A non-public network `http_fetch` may reach, on the given ports only.

    For a local test server or an intranet host that needs it: for example
    `AddressAllowance(network="127.0.0.1/32", ports=frozenset({8080}))`. Metadata,
    link-local, unspecified and multicast networks can never be allowed; an allowance
    that overlaps one is a ConfigurationError.
    """

    network: str
    ports: frozenset[int]
    _parsed: _Network = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            parsed = ipaddress.ip_network(self.network)
        except ValueError as exc:
            raise ConfigurationError(
                f"an address allowance needs a network such as 127.0.0.1/32: {exc}",
            ) from None
        if not self.ports or any(not 1 <= port <= MAX_PORT for port in self.ports):
            raise ConfigurationError("an address allowance names one or more ports (1-65535)")
        if any(_overlaps(parsed, never) for never in _NEVER):
            raise ConfigurationError(
                f"the allowance {parsed} overlaps metadata, link-local, unspecified or "
                f"multicast addresses, which can never be allowed",
            )
        object.__setattr__(self, "_parsed", parsed)

    def admits(self, address: IPAddress, port: int) -> bool:
        """True when the address is in this network and the port is one of its ports."""
        return port in self.ports and address in self._parsed


def _overlaps(first: _Network, second: _Network) -> bool:
    if first.version != second.version:
        return False
    return first.overlaps(second)


def address_block(
    address: IPAddress,
    port: int,
    allowances: Iterable[AddressAllowance] = (),
) -> BlockReason | None:
    """Why connecting to `address` on `port` is refused, or None when it is allowed.

    Never-allowable addresses are refused first, then IPv6 forms tunnelling to a
    non-public IPv4 address; an allowance can open the rest, else only public addresses
    pass.
    """
    address = _unwrap(address)
    if _never(address):
        return BlockReason.NEVER
    inner = _embedded(address)
    if inner is not None and (_never(inner) or not _public(inner)):
        return BlockReason.EMBEDDED
    if any(allowance.admits(address, port) for allowance in allowances):
        return None
    if not _public(address):
        return BlockReason.NON_PUBLIC
    return None
