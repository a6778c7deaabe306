"""Where `http_fetch` may go: strict URL parsing and the scheme, host and port allowlist.

Owns turning a model-given (or server-given, for redirects) URL into a Target, and the
checks that need no network: scheme, user information, host syntax (IDNA-normalized),
IP literals in every WHATWG spelling (`2130706433`, `0177.0.0.1`, `0x7f.1`), the domain
allowlist and the port. The parser is deliberately narrower than browsers: anything
ambiguous (backslashes, spaces, control characters, percent signs in hosts, zone ids)
is refused, so what is checked is exactly what is fetched. It never resolves names.
"""

from __future__ import annotations

import ipaddress
import re
import string
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

import idna

from handrail.errors import ConfigurationError, ErrorCode, InvalidArgument, ToolSignal
from handrail.tools._http_address import (
    MAX_PORT,
    AddressAllowance,
    BlockReason,
    IPAddress,
    address_block,
)

__all__ = [
    "DEFAULT_PORTS",
    "MAX_URL_CHARS",
    "BlockedDestination",
    "DestinationPolicy",
    "HostAllowlist",
    "Target",
    "parse_target",
]

MAX_URL_CHARS = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_HEX_PART = re.compile(r"0[xX][0-9A-Fa-f]*")
_OCTAL = re.compile(r"0[0-7]+")
_MAX_HOST_CHARS = 253
_FORBIDDEN = frozenset(chr(c) for c in range(0x21)) | {"\x7f", "\\"}
# Printable ASCII kept as written in paths and queries (existing %-escapes stay intact).
_PATH_SAFE = "".join(sorted(set(string.printable) - set(string.whitespace) - set('"<>^`{|}')))

_NOT_PUBLIC = (
    "The address is not allowed: private, local and reserved network addresses are blocked."
)
_BLOCKED_MESSAGES = {
    BlockReason.SCHEME: "The URL's scheme is not allowed.",
    BlockReason.DOMAIN: "The host is not on this tool's allowlist of domains.",
    BlockReason.IP_LITERAL: (
        "URLs that name an IP address are not allowed; use a host name on the allowlist."
    ),
    BlockReason.PORT: "The URL's port is not allowed.",
    BlockReason.NON_PUBLIC: _NOT_PUBLIC,
    BlockReason.EMBEDDED: _NOT_PUBLIC,
    BlockReason.NEVER: _NOT_PUBLIC,
    BlockReason.REDIRECT: "The redirect's URL is not valid.",
}


class BlockedDestination(ToolSignal):
    """The URL, or a redirect's, leads somewhere the policy forbids; nothing was sent there.

    The message never names the addresses a host resolved to. `reason` is for tests
    and operators.
    """

    code = ErrorCode.PERMISSION_DENIED

    def __init__(self, reason: BlockReason, *, redirected: bool = False) -> None:
        text = _BLOCKED_MESSAGES[reason]
        if redirected:
            text = f"The server redirected to a destination that is not allowed. {text}"
        super().__init__(text)
        self.reason = reason
        self.redirected = redirected


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """One URL, parsed: what is checked, and what is fetched.

    `host` is ASCII: IDNA A-labels, or an address in canonical form (`ip` is then set).
    `path` is the path and query, percent-encoded ASCII, starting with `/`; a fragment
    is dropped (it is never sent).
    """

    scheme: str
    host: str
    ip: IPAddress | None
    port: int
    path: str

    @property
    def authority(self) -> str:
        """`host[:port]` as sent in the Host header (the port only when not the default)."""
        host = f"[{self.host}]" if isinstance(self.ip, ipaddress.IPv6Address) else self.host
        if self.port == DEFAULT_PORTS.get(self.scheme):
            return host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The normalized URL."""
        return f"{self.scheme}://{self.authority}{self.path}"


def _invalid(message: str) -> InvalidArgument:
    return InvalidArgument(message)


def _split_scheme(text: str) -> tuple[str, str]:
    scheme, sep, rest = text.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        raise _invalid("The URL must be absolute, like https://example.com/page.")
    return scheme.lower(), rest


def parse_target(text: str, *, schemes: Iterable[str]) -> Target:
    """Parse an absolute http(s) URL strictly; InvalidArgument or BlockedDestination.

    The scheme is checked against `schemes` before anything else is looked at.
    """
    if len(text) > MAX_URL_CHARS:
        raise _invalid(f"The URL is longer than {MAX_URL_CHARS} characters.")
    if any(char in _FORBIDDEN for char in text):
        raise _invalid("The URL must not contain spaces, control characters or backslashes.")
    scheme, rest = _split_scheme(text)
    if scheme not in schemes or scheme not in DEFAULT_PORTS:
        raise BlockedDestination(BlockReason.SCHEME)
    rest = rest.partition("#")[0]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if "@" in authority:
        raise _invalid("URLs with a user name or password are not accepted.")
    host_text, port = _split_port(authority, DEFAULT_PORTS[scheme])
    host, ip = _parse_host(host_text)
    if not path.startswith("/"):
        path = f"/{path}"
    return Target(
        scheme=scheme,
        host=host,
        ip=ip,
        port=port,
        path=urllib.parse.quote(path, safe=_PATH_SAFE),
    )


def _split_port(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        inner, bracket, tail = authority[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise _invalid("The URL's host is not a valid host name or address.")
        host, port_text = f"[{inner}]", tail[1:]
    else:
        host, _, port_text = authority.partition(":")
    if not port_text:  # none, or an empty one ("host:"), means the default
        return host, default
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= MAX_PORT:
        raise _invalid("The URL's port is not a valid port number.")
    return host, int(port_text)


def _parse_host(text: str) -> tuple[str, IPAddress | None]:
    """(ASCII host, address or None); InvalidArgument for anything else."""
    bad = _invalid("The URL's host is not a valid host name or address.")
    if text.startswith("["):
        try:
            ip6 = ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            raise bad from None
        if ip6.scope_id is not None:
            raise bad
        return str(ip6), ip6
    if not text or "%" in text:
        raise bad
    try:
        name = normalize_name(text)
    except ValueError:
        raise bad from None
    if _ends_in_number(name):
        ip4 = whatwg_ipv4(name)
        if ip4 is None:
            raise bad
        return str(ip4), ip4
    return name, None


def normalize_name(text: str) -> str:
    """A host name as lowercase IDNA A-labels without a trailing dot; ValueError if invalid."""
    text = text.removesuffix(".")
    try:
        name = idna.encode(text, uts46=True, transitional=False).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise ValueError(str(exc)) from None
    name = name.removesuffix(".")  # an ideographic full stop maps to a dot
    if len(name) > _MAX_HOST_CHARS or not all(_LABEL.fullmatch(x) for x in name.split(".")):
        raise ValueError("not a host name")  # pragma: no cover - idna refuses these first
    return name


def _ends_in_number(name: str) -> bool:
    """WHATWG: a host whose last label is a number is an IPv4 address, or invalid."""
    last = name.rsplit(".", 1)[-1]
    return last.isdigit() or bool(_HEX_PART.fullmatch(last))


def whatwg_ipv4(name: str) -> ipaddress.IPv4Address | None:
    """Parse an IPv4 host the way browsers do (1-4 parts; decimal, octal or hex), or None."""
    parts = name.split(".")
    if len(parts) > 4:  # noqa: PLR2004 - an IPv4 address has at most four parts
        return None
    numbers: list[int] = []
    for part in parts:
        if _HEX_PART.fullmatch(part):
            numbers.append(int(part[2:] or "0", 16))
        elif part.startswith("0") and len(part) > 1:
            if not _OCTAL.fullmatch(part):
                return None
            numbers.append(int(part, 8))
        elif part.isdigit():
            numbers.append(int(part))
        else:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):  # noqa: PLR2004
        return None
    value = last + sum(n << (8 * (3 - i)) for i, n in enumerate(head))
    return ipaddress.IPv4Address(value)


@dataclass(frozen=True, slots=True)
class HostAllowlist:
    """Compiled domain allowlist: exact names, `*.suffix` patterns, `*`, and IP literals.

    `*.example.com` matches every subdomain of example.com but not example.com itself;
    `*` matches every host name but no IP literal (list those one by one).
    """

    names: frozenset[str]
    suffixes: tuple[str, ...]
    any_name: bool
    addresses: frozenset[IPAddress]

    @classmethod
    def compile(cls, patterns: Iterable[str]) -> HostAllowlist:
        """Normalize the patterns; ConfigurationError for one that is not valid."""
        names: set[str] = set()
        suffixes: list[str] = []
        addresses: set[IPAddress] = set()
        any_name = False
        for pattern in patterns:
            if pattern == "*":
                any_name = True
                continue
            try:
                if pattern.startswith("*."):
                    suffixes.append("." + normalize_name(pattern[2:]))
                    continue
                # A bare IPv6 address is accepted as well as a bracketed one.
                bracketed = f"[{pattern}]" if ":" in pattern and "[" not in pattern else pattern
                host, ip = _parse_host(bracketed)
            except (ValueError, InvalidArgument):
                raise ConfigurationError(
                    f"{pattern!r} is not a host name, *.suffix pattern, * or IP address",
                ) from None
            if ip is None:
                names.add(host)
            else:
                addresses.add(ip)
        if not (names or suffixes or addresses or any_name):
            raise ConfigurationError("the domain allowlist is empty; name the allowed hosts")
        return cls(frozenset(names), tuple(suffixes), any_name, frozenset(addresses))

    def admits(self, target: Target) -> BlockReason | None:
        """None when the target's host is allowed, else why not."""
        if target.ip is not None:
            return None if target.ip in self.addresses else BlockReason.IP_LITERAL
        host = target.host
        if self.any_name or host in self.names or host.endswith(self.suffixes):
            return None
        return BlockReason.DOMAIN


@dataclass(frozen=True, kw_only=True, slots=True)
class DestinationPolicy:
    """Everything that decides whether a URL and an address may be fetched."""

    schemes: frozenset[str]
    hosts: HostAllowlist
    ports: frozenset[int]
    allowances: tuple[AddressAllowance, ...]

    def target(self, url: str, *, redirected: bool = False) -> Target:
        """Parse and check a URL without the network; raise BlockedDestination or InvalidArgument.

        For a redirect every refusal is a BlockedDestination: the URL is the server's.
        """
        try:
            target = parse_target(url, schemes=self.schemes)
        except InvalidArgument:
            if not redirected:
                raise
            raise BlockedDestination(BlockReason.REDIRECT, redirected=True) from None
        except BlockedDestination as exc:
            raise BlockedDestination(exc.reason, redirected=redirected) from None
        reason = self.hosts.admits(target)
        default_port = DEFAULT_PORTS[target.scheme]
        if reason is None and target.port != default_port and target.port not in self.ports:
            reason = BlockReason.PORT
        if reason is not None:
            raise BlockedDestination(reason, redirected=redirected)
        return target

    def check_address(self, address: IPAddress, port: int, *, redirected: bool) -> None:
        """Raise BlockedDestination unless connecting to `address` on `port` is allowed."""
        reason = address_block(address, port, self.allowances)
        if reason is not None:
            raise BlockedDestination(reason, redirected=redirected)
