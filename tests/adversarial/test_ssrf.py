"""SSRF attacks on http_fetch: loopback, metadata, private networks, by address or by name.

Every attack must be refused before any connection: a canary server listens where an
attack would land and counts connections, and a spy on httpx's network backend records
every TCP connection the fetch opens. The policy is the default one (no address
allowance) unless a test needs a real server to redirect from, which then gets a narrow
allowance for its own address and port only.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import pytest
from httpcore._backends.anyio import AnyIOBackend
from hypothesis import given
from hypothesis import strategies as st

from _http_server import LoopbackServer, QuietHandler, run_server
from handrail import Gate, Principal, Registry, ToolCall
from handrail.envelope import Envelope, Status
from handrail.errors import ConfigurationError, ErrorCode
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.tools._http_address import BlockReason, IPAddress, address_block
from handrail.tools.http import (
    AddressAllowance,
    BlockedDestination,
    HttpConfig,
    StaticResolver,
    SystemResolver,
    _Fetcher,
    http_tools,
)

pytestmark = pytest.mark.anyio

READER = Principal(user_id="u", tenant_id="t1")
ADDRESS_REASONS = {BlockReason.NON_PUBLIC, BlockReason.EMBEDDED, BlockReason.NEVER}

# --- servers and spies -----------------------------------------------------------------------


class _Server(LoopbackServer):
    """A real HTTP server that counts connections and answers from a route table."""

    def __init__(self, host: str, routes: dict[str, tuple[int, str]]) -> None:
        self.routes = routes
        self.paths: list[str] = []
        super().__init__(host, _Handler)


class _Handler(QuietHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.paths.append(self.path)
        status, location = self.server.routes.get(self.path, (200, ""))
        body = b"canary" if status == 200 else b""
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)


@contextmanager
def serving(host: str, routes: dict[str, tuple[int, str]] | None = None) -> Iterator[_Server]:
    with run_server(_Server(host, routes if routes is not None else {})) as server:
        yield server


@dataclass
class Canaries:
    """Servers where an attack would land, on IPv4 loopback and (when the host has it) IPv6."""

    v4: _Server
    v6: _Server | None

    @property
    def port6(self) -> int:
        return self.v6.port if self.v6 is not None else self.v4.port

    def untouched(self) -> bool:
        reached = self.v4.connections + (self.v6.connections if self.v6 else 0)
        return reached == 0


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture
def canaries() -> Iterator[Canaries]:
    with serving("127.0.0.1") as v4:
        if _ipv6_loopback():
            with serving("::1") as v6:
                yield Canaries(v4, v6)
        else:
            yield Canaries(v4, None)


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connection httpx opens, as (host, port)."""
    seen: list[tuple[str, int]] = []
    original = AnyIOBackend.connect_tcp

    async def spy(self: AnyIOBackend, host: str, port: int, **options: Any) -> Any:
        seen.append((host, port))
        return await original(self, host, port, **options)

    monkeypatch.setattr(AnyIOBackend, "connect_tcp", spy)
    return seen


class _Recording:
    """A resolver answering from a table (or a sequence of tables), counting its queries."""

    def __init__(self, *tables: dict[str, list[str]]) -> None:
        self._answers = [StaticResolver(table) for table in tables]
        self.queries: list[str] = []

    async def resolve(self, host: str) -> Sequence[IPAddress]:
        self.queries.append(host)
        answer = self._answers[min(len(self.queries), len(self._answers)) - 1]
        return await answer.resolve(host)


async def through_gate(config: HttpConfig, resolver: Any, url: str) -> Envelope:
    registry = Registry()
    registry.register(http_tools(config, resolver=resolver)[0])
    gate = Gate(registry, audit=MemoryAuditSink(), clock=FixedClock(), new_id=sequential_ids())
    call = ToolCall(id="c1", name="web.http_fetch", arguments={"url": url})
    return await gate.handle(call, READER)


async def blocked_reason(config: HttpConfig, resolver: Any, url: str) -> BlockReason:
    with pytest.raises(BlockedDestination) as caught:
        await _Fetcher(config, resolver, None).fetch(url, "GET", 10.0)
    return caught.value.reason


# --- direct attacks, with every other defence opened -----------------------------------------

RESOLVED = {
    "localhost": ["127.0.0.1", "::1"],
    "internal.test": ["127.0.0.1"],
    "ten.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "alibaba.test": ["100.100.100.200"],
    "mixed.test": ["93.184.216.34", "10.0.0.5"],
    "mixed-order.test": ["10.0.0.5", "93.184.216.34"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "v6.test": ["::1"],
    "aws6.test": ["2606:4700::1111", "fd00:ec2::254"],
    "sixtofour.test": ["2002:a00:5::"],
    "nat64.test": ["64:ff9b::a9fe:a9fe"],
    "shared.test": ["100.64.0.1"],
    "zero.test": ["0.0.0.0"],  # noqa: S104 - an attacker's answer, not a bind
}

DIRECT = [
    "http://127.0.0.1:{c}/",
    "http://localhost:{c}/",
    "http://[::1]:{c6}/",
    "http://0.0.0.0:{c}/",
    "http://0:{c}/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://100.100.100.200/latest/meta-data/",
    "http://168.63.129.16/machine",
    "http://[::ffff:127.0.0.1]:{c}/",
    "http://[::ffff:7f00:1]:{c}/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::127.0.0.1]:{c}/",
    "http://[64:ff9b::7f00:1]:{c}/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:7f00:1::]:{c}/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{c}/",
    "http://2130706433:{c}/",
    "http://0177.0.0.1:{c}/",
    "http://0x7f.1:{c}/",
    "http://0x7f000001:{c}/",
    "http://127.1:{c}/",
    "http://017700000001:{c}/",
    "http://0xa9fea9fe/",
    "http://169.254.43518/",
    "http://10.0.0.5/",
    "http://192.168.1.1/",
    "http://172.16.0.1/",
    "http://100.64.0.1/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://198.18.0.1/",
    "http://internal.test:{c}/",
    "http://ten.test/",
    "http://metadata.test/latest/meta-data/",
    "http://alibaba.test/",
    "http://mixed.test/",
    "http://mixed-order.test/",
    "http://mapped.test:{c}/",
    "http://v6.test:{c6}/",
    "http://aws6.test/",
    "http://sixtofour.test/",
    "http://nat64.test/",
    "http://shared.test/",
    "http://zero.test:{c}/",
]


def _open_config(url: str, canaries: Canaries) -> HttpConfig:
    """Every scheme, port and host (IP literals too) allowed: only the address check is left."""
    host = urllib.parse.urlsplit(url).hostname or ""
    return HttpConfig(
        domains=("*", host),
        schemes=frozenset({"http", "https"}),
        ports=frozenset({canaries.v4.port, canaries.port6}),
    )


@pytest.mark.parametrize("template", DIRECT)
async def test_an_ssrf_target_is_refused_by_its_address_before_any_connection(
    template: str,
    canaries: Canaries,
    connections: list[tuple[str, int]],
) -> None:
    url = template.format(c=canaries.v4.port, c6=canaries.port6)
    config = _open_config(url, canaries)
    envelope = await through_gate(config, _Recording(RESOLVED), url)
    assert envelope.status is Status.ERROR
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert not envelope.retryable
    assert await blocked_reason(config, _Recording(RESOLVED), url) in ADDRESS_REASONS
    # Nothing about what the name resolved to is told to the model.
    for address in (a for answers in RESOLVED.values() for a in answers):
        assert address not in envelope.summary
    assert connections == []
    assert canaries.untouched()


@pytest.mark.parametrize(
    "template",
    [t for t in DIRECT if urllib.parse.urlsplit(t).hostname not in RESOLVED],
)
async def test_ip_literals_are_refused_without_a_lookup_when_only_names_are_allowed(
    template: str,
    canaries: Canaries,
    connections: list[tuple[str, int]],
) -> None:
    url = template.format(c=canaries.v4.port, c6=canaries.port6)
    config = HttpConfig(
        domains=("*",),
        schemes=frozenset({"http"}),
        ports=frozenset({canaries.v4.port, canaries.port6}),
    )
    resolver = _Recording(RESOLVED)
    assert await blocked_reason(config, resolver, url) is BlockReason.IP_LITERAL
    envelope = await through_gate(config, resolver, url)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    # `2130706433` and friends never reach a resolver that might read them as addresses.
    assert resolver.queries == []
    assert connections == []
    assert canaries.untouched()


@pytest.mark.parametrize("name", sorted(RESOLVED))
async def test_names_resolving_to_forbidden_addresses_are_refused_under_the_defaults(
    name: str,
    connections: list[tuple[str, int]],
) -> None:
    config = HttpConfig(domains=("*",))  # https only, default ports, no allowance
    resolver = _Recording(RESOLVED)
    url = f"https://{name}/"
    assert await blocked_reason(config, resolver, url) in ADDRESS_REASONS
    envelope = await through_gate(config, resolver, url)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert connections == []


async def test_localhost_through_the_system_resolver_is_refused(
    connections: list[tuple[str, int]],
) -> None:
    config = HttpConfig(domains=("*",))
    assert await blocked_reason(config, SystemResolver(), "https://localhost/") in ADDRESS_REASONS
    assert connections == []


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/",
        "https://localhost/",
        "https://169.254.169.254/latest/meta-data/",
        "https://example.com.evil.test/",
        "https://evil.test/#example.com",
        "https://example.com@evil.test/",
        "https://example.com:8443/",
        "http://example.com/",
        "file:///etc/passwd",
    ],
)
async def test_a_narrow_allowlist_refuses_everything_else_before_resolving(
    url: str,
    connections: list[tuple[str, int]],
) -> None:
    resolver = _Recording({"example.com": ["93.184.216.34"], "evil.test": ["127.0.0.1"]})
    envelope = await through_gate(HttpConfig(domains=("example.com",)), resolver, url)
    assert envelope.error_type in {ErrorCode.PERMISSION_DENIED, ErrorCode.INVALID_ARGUMENTS}
    assert resolver.queries == []
    assert connections == []


# --- redirects from an allowed server --------------------------------------------------------

REDIRECT_TARGETS = [
    "http://127.0.0.1:{c}/",
    "http://localhost:{c}/",
    "http://internal.test:{c}/",
    "http://allowed.test:{c}/",
    "http://169.254.169.254/latest/meta-data/",
    "http://metadata.test/latest/meta-data/",
    "http://[::ffff:127.0.0.1]:{c}/",
    "http://[::1]:{c6}/",
    "http://2130706433:{c}/",
    "http://0x7f.1:{c}/",
    "http://ten.test/",
    "http://evil.test:{c}/",
    "//127.0.0.1:{c}/",
    "//evil.test:{c}/",
    "https://allowed.test:{a}/",
    "file:///etc/passwd",
    "gopher://127.0.0.1:{c}/_SSRF",
    "http://allowed.test@127.0.0.1:{c}/",
    "http://127.0.0.1:{c}\\@allowed.test/",
    "http://127.0.0.1:{c} /",
]


@contextmanager
def redirecting(status: int, template: str, canaries: Canaries) -> Iterator[tuple[_Server, str]]:
    routes: dict[str, tuple[int, str]] = {}
    with serving("127.0.0.1", routes) as allowed:
        location = template.format(a=allowed.port, c=canaries.v4.port, c6=canaries.port6)
        routes["/go"] = (status, location)
        routes["/hop"] = (302, "/go")
        yield allowed, f"http://allowed.test:{allowed.port}"


def _redirect_config(allowed: _Server, canaries: Canaries) -> HttpConfig:
    """A narrow allowance for the allowed server only; every host but evil.test is listed."""
    return HttpConfig(
        domains=(
            "allowed.test",
            "internal.test",
            "metadata.test",
            "ten.test",
            "localhost",
            "127.0.0.1",
            "::1",
            "169.254.169.254",
        ),
        schemes=frozenset({"http"}),
        ports=frozenset({allowed.port, canaries.v4.port, canaries.port6}),
        allowances=(AddressAllowance(network="127.0.0.1/32", ports=frozenset({allowed.port})),),
    )


def _redirect_resolver() -> _Recording:
    return _Recording(
        {
            "allowed.test": ["127.0.0.1"],
            "internal.test": ["127.0.0.1"],
            "metadata.test": ["169.254.169.254"],
            "ten.test": ["10.0.0.5"],
            "localhost": ["127.0.0.1"],
            "evil.test": ["127.0.0.1"],
        },
    )


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("template", REDIRECT_TARGETS)
async def test_a_redirect_to_a_forbidden_target_is_refused_before_connecting(
    status: int,
    template: str,
    canaries: Canaries,
    connections: list[tuple[str, int]],
) -> None:
    with redirecting(status, template, canaries) as (allowed, base):
        envelope = await through_gate(
            _redirect_config(allowed, canaries), _redirect_resolver(), f"{base}/go"
        )
        assert envelope.error_type is ErrorCode.PERMISSION_DENIED
        assert allowed.paths == ["/go"]
        assert connections == [("127.0.0.1", allowed.port)]
        assert canaries.untouched()


async def test_the_allowed_server_itself_is_fetched_under_the_same_policy(
    canaries: Canaries,
) -> None:
    # The control for the test above: the policy does let the allowed server through.
    with redirecting(302, "/done", canaries) as (allowed, base):
        envelope = await through_gate(
            _redirect_config(allowed, canaries), _redirect_resolver(), f"{base}/go"
        )
        assert envelope.status is Status.OK
        assert envelope.data["text"] == "canary"
        assert allowed.paths == ["/go", "/done"]


@pytest.mark.parametrize(
    "template",
    ["http://127.0.0.1:{c}/", "http://169.254.169.254/", "http://internal.test:{c}/"],
)
async def test_a_forbidden_target_behind_several_allowed_hops_is_still_refused(
    template: str,
    canaries: Canaries,
    connections: list[tuple[str, int]],
) -> None:
    with redirecting(302, template, canaries) as (allowed, base):
        envelope = await through_gate(
            _redirect_config(allowed, canaries), _redirect_resolver(), f"{base}/hop"
        )
        assert envelope.error_type is ErrorCode.PERMISSION_DENIED
        assert allowed.paths == ["/hop", "/go"]
        assert connections == [("127.0.0.1", allowed.port)] * 2
        assert canaries.untouched()


# --- DNS rebinding ---------------------------------------------------------------------------


async def test_a_second_dns_answer_cannot_redirect_the_connection(
    canaries: Canaries,
    connections: list[tuple[str, int]],
) -> None:
    with redirecting(302, "/done", canaries) as (allowed, _):
        config = _redirect_config(allowed, canaries)
        # First answer allowed, every later answer the metadata service.
        resolver = _Recording(
            {"allowed.test": ["127.0.0.1"]}, {"allowed.test": ["169.254.169.254"]}
        )
        envelope = await through_gate(config, resolver, f"http://allowed.test:{allowed.port}/done")
        assert envelope.status is Status.OK
        assert resolver.queries == ["allowed.test"]
        assert connections == [("127.0.0.1", allowed.port)]


async def test_a_redirect_to_the_same_name_is_resolved_and_checked_again(
    canaries: Canaries,
    connections: list[tuple[str, int]],
) -> None:
    with redirecting(302, "/done", canaries) as (allowed, base):
        config = _redirect_config(allowed, canaries)
        resolver = _Recording(
            {"allowed.test": ["127.0.0.1"]}, {"allowed.test": ["169.254.169.254"]}
        )
        envelope = await through_gate(config, resolver, f"{base}/go")
        assert envelope.error_type is ErrorCode.PERMISSION_DENIED
        assert resolver.queries == ["allowed.test", "allowed.test"]
        assert allowed.paths == ["/go"]
        assert connections == [("127.0.0.1", allowed.port)]


# --- the address verdict, property by property -----------------------------------------------

NON_PUBLIC_V4 = [
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "192.0.2.0/24",
    "198.18.0.0/15",
    "240.0.0.0/4",
]
NEVER_V4 = ["0.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4"]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700::1111", "2a00:1450:4001::1"]
# No allowance may cover Alibaba's metadata address (in 100.64.0.0/10) or the broadcast
# address (in 240.0.0.0/4), so these two are opened only in part.
ALLOWABLE_V4 = [
    {"100.64.0.0/10": "100.64.0.0/11", "240.0.0.0/4": "240.0.0.0/5"}.get(n, n)
    for n in NON_PUBLIC_V4
]
EVERY_PRIVATE_ALLOWANCE = tuple(
    AddressAllowance(network=network, ports=frozenset({80}))
    for network in (*ALLOWABLE_V4, "::1/128", "fc00::/8")
)


def _wrapped(v4: ipaddress.IPv4Address) -> dict[str, ipaddress.IPv6Address]:
    value = int(v4)
    teredo_client = value ^ 0xFFFF_FFFF
    return {
        "mapped": ipaddress.IPv6Address(0xFFFF << 32 | value),
        "nat64": ipaddress.IPv6Address(0x64FF9B << 96 | value),
        "compatible": ipaddress.IPv6Address(value),
        "6to4": ipaddress.IPv6Address(0x2002 << 112 | value << 80),
        "teredo": ipaddress.IPv6Address(
            0x2001_0000 << 96 | 0x4136_E378 << 64 | 0xFFFF << 32 | teredo_client
        ),
    }


def _in(networks: list[str]) -> st.SearchStrategy[ipaddress.IPv4Address]:
    return st.sampled_from(networks).flatmap(
        lambda n: st.ip_addresses(network=n).map(ipaddress.IPv4Address),
    )


@given(_in(NON_PUBLIC_V4 + NEVER_V4))
def test_a_non_public_ipv4_address_is_blocked_in_every_ipv6_disguise(
    address: ipaddress.IPv4Address,
) -> None:
    assert address_block(address, 80) is not None
    for form, wrapped in _wrapped(address).items():
        assert address_block(wrapped, 80) is not None, form


@given(_in(ALLOWABLE_V4))
def test_an_allowance_opens_the_address_but_not_the_tunnels_towards_it(
    address: ipaddress.IPv4Address,
) -> None:
    assert address_block(address, 80, EVERY_PRIVATE_ALLOWANCE) is None
    assert address_block(address, 81, EVERY_PRIVATE_ALLOWANCE) is BlockReason.NON_PUBLIC
    wrapped = _wrapped(address)
    for form in ("6to4", "teredo"):
        assert address_block(wrapped[form], 80, EVERY_PRIVATE_ALLOWANCE) is not None, form


@given(_in(NEVER_V4))
def test_never_allowable_addresses_stay_blocked_whatever_is_allowed(
    address: ipaddress.IPv4Address,
) -> None:
    assert address_block(address, 80, EVERY_PRIVATE_ALLOWANCE) is BlockReason.NEVER
    for form in ("mapped", "nat64"):
        assert address_block(_wrapped(address)[form], 80, EVERY_PRIVATE_ALLOWANCE) is not None


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_and_the_ipv6_forms_that_reach_it_get_one_verdict(
    address: ipaddress.IPv4Address,
) -> None:
    verdict = address_block(address, 443) is None
    wrapped = _wrapped(address)
    assert (address_block(wrapped["mapped"], 443) is None) is verdict
    assert (address_block(wrapped["nat64"], 443) is None) is verdict


@pytest.mark.parametrize("text", PUBLIC)
def test_public_addresses_pass(text: str) -> None:
    address = ipaddress.ip_address(text)
    assert address_block(address, 443) is None
    if isinstance(address, ipaddress.IPv4Address):
        for form in ("mapped", "nat64", "6to4"):
            assert address_block(_wrapped(address)[form], 443) is None, form


@pytest.mark.parametrize(
    "text",
    [
        "169.254.169.254",
        "169.254.170.2",
        "169.254.0.23",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "100.100.100.200",
        "168.63.129.16",
        "192.0.0.192",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "fe80::a9fe:a9fe",
        "ff02::1",
        "::",
        "255.255.255.255",
    ],
)
def test_metadata_and_link_local_addresses_are_never_allowed(text: str) -> None:
    assert address_block(ipaddress.ip_address(text), 80, EVERY_PRIVATE_ALLOWANCE) is not None


@pytest.mark.parametrize(
    "network",
    [
        "fc00::/7",
        "fd00::/8",
        "100.64.0.0/10",
        "100.100.0.0/16",
        "168.63.0.0/16",
        "192.0.0.0/24",
        "169.254.169.0/24",
    ],
)
def test_an_allowance_that_would_cover_a_metadata_address_is_refused(network: str) -> None:
    with pytest.raises(ConfigurationError):
        AddressAllowance(network=network, ports=frozenset({80}))
