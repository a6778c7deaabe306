"""http_fetch against a real HTTP(S) server on 127.0.0.1, plus its parsers and decoders.

The server is reached as `allowed.test` (a static resolver maps it to 127.0.0.1) under
a test-only allowance for its port; nothing here leaves the machine.
"""

from __future__ import annotations

import gzip
import ipaddress
import socket
import ssl
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from httpcore._backends.anyio import AnyIOBackend
from hypothesis import given
from hypothesis import strategies as st

from _http_server import LoopbackServer, QuietHandler
from handrail import Gate, Principal, Registry, ToolCall
from handrail.envelope import Envelope, Status, Trust
from handrail.errors import ConfigurationError, ErrorCode, InvalidArgument
from handrail.spec import RiskLevel, SideEffect
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.tools._http_address import BlockReason, IPAddress
from handrail.tools._http_body import (
    BoundedDecoder,
    UnsupportedEncodingError,
    decode_text,
    media_allowed,
    parse_content_type,
)
from handrail.tools._http_target import (
    BlockedDestination,
    HostAllowlist,
    parse_target,
    whatwg_ipv4,
)
from handrail.tools.http import (
    AddressAllowance,
    FetchTimedOut,
    HttpConfig,
    OtherContent,
    StaticResolver,
    SystemResolver,
    _Fetcher,
    http_tools,
)

pytestmark = pytest.mark.anyio

READER = Principal(user_id="u", tenant_id="t1")
HOST = "allowed.test"

# --- a real local server ---------------------------------------------------------------------

Route = Callable[["_Handler"], None]


@dataclass
class _Seen:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


class _Server(LoopbackServer):
    def __init__(self, routes: dict[str, Route], host: str) -> None:
        self.routes = routes
        self.seen: list[_Seen] = []
        self.release = threading.Event()
        self.server_names: list[str | None] = []
        super().__init__(host, _Handler)


class _Handler(QuietHandler):
    server: _Server

    def _dispatch(self) -> None:
        self.server.seen.append(_Seen(self.command, self.path, dict(self.headers.items())))
        route = self.server.routes.get(self.path.split("?")[0])
        if route is None:
            reply(self, 404, b"no such page", "text/plain")
        else:
            route(self)

    do_GET = do_HEAD = do_OPTIONS = do_POST = _dispatch  # noqa: N815 - http.server's names


def reply(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes = b"",
    content_type: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    *,
    length: int | None = None,
) -> None:
    handler.send_response(status)
    if content_type is not None:
        handler.send_header("Content-Type", content_type)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    handler.end_headers()
    if handler.command != "HEAD":
        with suppress(BrokenPipeError, ConnectionResetError):
            handler.wfile.write(body)


@contextmanager
def serving(
    routes: dict[str, Route],
    *,
    host: str = "127.0.0.1",
    tls: ssl.SSLContext | None = None,
) -> Iterator[_Server]:
    server = _Server(routes, host)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _text(body: str, content_type: str = "text/plain; charset=utf-8") -> Route:
    return lambda h: reply(h, 200, body.encode(), content_type)


def _redirect(location: str, status: int = 302) -> Route:
    return lambda h: reply(h, status, b"", "text/plain", [("Location", location)])


def _big(h: BaseHTTPRequestHandler) -> None:
    chunk = b"x" * 1000
    h.send_response(200)
    h.send_header("Content-Type", "text/plain")
    h.send_header("Content-Length", str(len(chunk) * 5000))
    h.end_headers()
    try:
        for _ in range(5000):
            h.wfile.write(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass


def _slow(h: _Handler) -> None:
    h.server.release.wait(10)
    reply(h, 200, b"late", "text/plain")


def _hang_up(h: BaseHTTPRequestHandler) -> None:
    h.close_connection = True  # no response at all


_BOMB = gzip.compress(b"\0" * 20_000_000)

ROUTES: dict[str, Route] = {
    "/text": _text("hello from the test server"),
    "/json": _text('{"answer": 42}', "application/json"),
    "/latin1": lambda h: reply(h, 200, "café".encode("latin-1"), "text/plain; charset=latin-1"),
    "/png": lambda h: reply(h, 200, b"\x89PNG\r\n\x1a\n", "image/png"),
    "/untyped": lambda h: reply(h, 200, b"what am I"),
    "/big": _big,
    "/slow": _slow,
    "/gzip": lambda h: reply(
        h, 200, gzip.compress(b"squeezed text"), "text/plain", [("Content-Encoding", "gzip")]
    ),
    "/bomb": lambda h: reply(h, 200, _BOMB, "text/plain", [("Content-Encoding", "gzip")]),
    "/brotli": lambda h: reply(h, 200, b"??", "text/plain", [("Content-Encoding", "br")]),
    "/corrupt": lambda h: reply(h, 200, b"not gzip", "text/plain", [("Content-Encoding", "gzip")]),
    "/short": lambda h: reply(h, 200, b"only this", "text/plain", length=1000),
    "/headers": lambda h: reply(
        h,
        200,
        b"ok",
        "text/plain",
        [("ETag", '"v1"'), ("Set-Cookie", "session=s3cr3t"), ("X-Internal", "node-7")],
    ),
    "/host": lambda h: reply(h, 200, str(h.headers["Host"]).encode(), "text/plain"),
    "/redirect": _redirect("/text"),
    "/redirect-abs": _redirect(f"http://{HOST}:{{port}}/json", 301),
    "/see-other": _redirect("/text", 303),
    "/loop": _redirect("/loop"),
    "/nowhere": lambda h: reply(h, 302, b"moved, but where?", "text/plain"),
    "/hangup": _hang_up,
}


@pytest.fixture
def server() -> Iterator[_Server]:
    routes = dict(ROUTES)
    with serving(routes) as running:
        routes["/redirect-abs"] = _redirect(f"http://{HOST}:{running.port}/json", 301)
        yield running


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connection httpx opens, as (host, port): the real network's view."""
    seen: list[tuple[str, int]] = []
    original = AnyIOBackend.connect_tcp

    async def spy(self: AnyIOBackend, host: str, port: int, **options: Any) -> Any:
        seen.append((host, port))
        return await original(self, host, port, **options)

    monkeypatch.setattr(AnyIOBackend, "connect_tcp", spy)
    return seen


class _Recording:
    """A resolver that counts its queries, answering from a table."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self._inner = StaticResolver(table)
        self.queries: list[str] = []

    async def resolve(self, host: str) -> tuple[IPAddress, ...]:
        self.queries.append(host)
        return await self._inner.resolve(host)


def local_config(port: int, **options: Any) -> HttpConfig:
    """The test server's allowance: its own address and port, over plain HTTP."""
    options.setdefault("domains", (HOST,))
    options.setdefault("schemes", frozenset({"http"}))
    return HttpConfig(
        ports=frozenset({port}),
        allowances=(AddressAllowance(network="127.0.0.1/32", ports=frozenset({port})),),
        **options,
    )


async def fetch(
    config: HttpConfig,
    arguments: dict[str, object],
    *,
    resolver: Any = None,
    tls: ssl.SSLContext | None = None,
) -> Envelope:
    registry = Registry()
    registry.register(
        http_tools(
            config,
            resolver=resolver or StaticResolver({HOST: ["127.0.0.1"]}),
            tls=tls,
        )[0]
    )
    gate = Gate(registry, audit=MemoryAuditSink(), clock=FixedClock(), new_id=sequential_ids())
    call = ToolCall(id="c1", name="web.http_fetch", arguments=arguments)
    return await gate.handle(call, READER)


def url(server: _Server, path: str, host: str = HOST) -> str:
    return f"http://{host}:{server.port}{path}"


# --- fetching --------------------------------------------------------------------------------


async def test_a_text_page_comes_back_as_untrusted_web_data(
    server: _Server,
    connections: list[tuple[str, int]],
) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/text")})
    assert envelope.status is Status.OK
    assert envelope.trust is Trust.UNTRUSTED
    assert envelope.source_label == "web"
    data = envelope.data
    assert data["status"] == 200
    assert data["text"] == "hello from the test server"
    assert data["content_type"] == "text/plain"
    assert data["charset"] == "utf-8"
    assert data["url"] == url(server, "/text")
    assert data["bytes_read"] == len("hello from the test server")
    assert data["truncated"] is False
    assert data["body_omitted"] is False
    assert data["redirects"] == []
    # Connected to the vetted address; the name travelled only in the Host header.
    assert connections == [("127.0.0.1", server.port)]
    [seen] = server.seen
    assert seen.headers["Host"] == f"{HOST}:{server.port}"
    assert "Cookie" not in seen.headers
    assert "Authorization" not in seen.headers


async def test_json_comes_back_as_text(server: _Server) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/json")})
    assert envelope.data["content_type"] == "application/json"
    assert envelope.data["text"] == '{"answer": 42}'


async def test_a_declared_charset_decodes_the_body(server: _Server) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/latin1")})
    assert envelope.data["text"] == "café"
    assert envelope.data["charset"] == "iso8859-1"


async def test_head_returns_headers_without_a_body(server: _Server) -> None:
    envelope = await fetch(
        local_config(server.port), {"url": url(server, "/text"), "method": "HEAD"}
    )
    assert envelope.status is Status.OK
    assert envelope.data["text"] is None
    assert envelope.data["bytes_read"] == 0
    assert envelope.data["headers"]["content-length"] == str(len("hello from the test server"))
    assert [seen.method for seen in server.seen] == ["HEAD"]


async def test_options_runs_only_when_the_configuration_allows_it(server: _Server) -> None:
    config = local_config(server.port, methods=frozenset({"GET", "OPTIONS"}))
    envelope = await fetch(config, {"url": url(server, "/text"), "method": "OPTIONS"})
    assert envelope.status is Status.OK
    refused = await fetch(
        local_config(server.port), {"url": url(server, "/text"), "method": "OPTIONS"}
    )
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    assert [seen.method for seen in server.seen] == ["OPTIONS"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "get", "CONNECT", "TRACE"])
async def test_methods_outside_the_configuration_are_refused_before_any_request(
    server: _Server,
    method: str,
) -> None:
    envelope = await fetch(
        local_config(server.port), {"url": url(server, "/text"), "method": method}
    )
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert server.connections == 0


async def test_a_body_over_the_byte_limit_is_cut_and_marked_truncated(server: _Server) -> None:
    envelope = await fetch(local_config(server.port, max_bytes=1000), {"url": url(server, "/big")})
    assert envelope.data["truncated"] is True
    assert envelope.data["bytes_read"] == 1000
    assert envelope.data["text"] == "x" * 1000


async def test_gzip_is_decoded(server: _Server) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/gzip")})
    assert envelope.data["text"] == "squeezed text"
    assert envelope.data["truncated"] is False


async def test_a_compression_bomb_is_read_only_up_to_the_byte_limit(server: _Server) -> None:
    envelope = await fetch(
        local_config(server.port, max_bytes=10_000), {"url": url(server, "/bomb")}
    )
    assert envelope.data["truncated"] is True
    assert envelope.data["bytes_read"] == 10_000


@pytest.mark.parametrize("path", ["/brotli", "/corrupt"])
async def test_bodies_that_cannot_be_decoded_fail_finally(server: _Server, path: str) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, path)})
    assert envelope.error_type is ErrorCode.FAILED_FINAL


async def test_a_server_that_hangs_up_without_answering_is_retryable(server: _Server) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/hangup")})
    assert envelope.error_type is ErrorCode.TRANSIENT
    assert envelope.retryable


async def test_a_connection_that_breaks_mid_body_is_retryable(server: _Server) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/short")})
    assert envelope.error_type is ErrorCode.TRANSIENT
    assert envelope.retryable


@pytest.mark.parametrize("path", ["/png", "/untyped"])
async def test_other_content_types_return_metadata_only(server: _Server, path: str) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, path)})
    assert envelope.status is Status.OK
    assert envelope.data["body_omitted"] is True
    assert envelope.data["text"] is None
    assert envelope.data["bytes_read"] == 0


async def test_other_content_types_can_be_refused_instead(server: _Server) -> None:
    config = local_config(server.port, other_content=OtherContent.REFUSE)
    envelope = await fetch(config, {"url": url(server, "/png")})
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert "image/png" not in envelope.summary  # the server's words never become ours


async def test_the_content_type_allowlist_is_configurable(server: _Server) -> None:
    config = local_config(server.port, content_types=("image/*",))
    png = await fetch(config, {"url": url(server, "/png")})
    text = await fetch(config, {"url": url(server, "/text")})
    assert png.data["body_omitted"] is False
    assert text.data["body_omitted"] is True


async def test_only_safe_response_headers_are_returned(server: _Server) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/headers")})
    headers = envelope.data["headers"]
    assert headers["etag"] == '"v1"'
    assert "set-cookie" not in headers
    assert "x-internal" not in headers


async def test_an_error_status_is_data_not_a_failure(server: _Server) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/missing")})
    assert envelope.status is Status.OK
    assert envelope.data["status"] == 404
    assert envelope.data["text"] == "no such page"


async def test_a_slow_server_times_out_with_a_retryable_timeout(server: _Server) -> None:
    envelope = await fetch(local_config(server.port, timeout=0.3), {"url": url(server, "/slow")})
    assert envelope.error_type is ErrorCode.TIMEOUT
    assert envelope.retryable


async def test_a_fetch_without_time_left_does_not_start() -> None:
    fetcher = _Fetcher(HttpConfig(domains=("example.com",)), StaticResolver({}), None)
    with pytest.raises(FetchTimedOut):
        await fetcher.fetch("https://example.com/", "GET", 0.0)


# --- redirects -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/redirect", "/redirect-abs"])
async def test_redirects_within_the_allowlist_are_followed(server: _Server, path: str) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, path)})
    assert envelope.status is Status.OK
    assert envelope.data["status"] == 200
    assert envelope.data["redirects"] == [url(server, path)]
    assert envelope.data["url"] in {url(server, "/text"), url(server, "/json")}
    assert len(server.seen) == 2


async def test_see_other_turns_options_into_get(server: _Server) -> None:
    config = local_config(server.port, methods=frozenset({"GET", "OPTIONS"}))
    envelope = await fetch(config, {"url": url(server, "/see-other"), "method": "OPTIONS"})
    assert envelope.data["text"] == "hello from the test server"
    assert [seen.method for seen in server.seen] == ["OPTIONS", "GET"]


async def test_head_stays_head_across_a_redirect(server: _Server) -> None:
    envelope = await fetch(
        local_config(server.port), {"url": url(server, "/see-other"), "method": "HEAD"}
    )
    assert envelope.data["status"] == 200
    assert [seen.method for seen in server.seen] == ["HEAD", "HEAD"]


@pytest.mark.parametrize("limit", [0, 1, 3])
async def test_redirects_past_the_limit_fail(server: _Server, limit: int) -> None:
    envelope = await fetch(
        local_config(server.port, max_redirects=limit), {"url": url(server, "/loop")}
    )
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert len(server.seen) == limit + 1


async def test_a_redirect_without_a_location_is_returned_as_it_is(server: _Server) -> None:
    envelope = await fetch(local_config(server.port), {"url": url(server, "/nowhere")})
    assert envelope.data["status"] == 302
    assert envelope.data["text"] == "moved, but where?"


async def test_every_hop_resolves_once_and_connects_to_the_vetted_address(
    server: _Server,
    connections: list[tuple[str, int]],
) -> None:
    resolver = _Recording({HOST: ["127.0.0.1"]})
    envelope = await fetch(
        local_config(server.port), {"url": url(server, "/redirect")}, resolver=resolver
    )
    assert envelope.status is Status.OK
    assert resolver.queries == [HOST, HOST]
    assert connections == [("127.0.0.1", server.port)] * 2


# --- refusals before the network -------------------------------------------------------------


async def test_http_is_refused_unless_configured(server: _Server) -> None:
    config = local_config(server.port, schemes=frozenset({"https"}))
    envelope = await fetch(config, {"url": url(server, "/text")})
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert server.connections == 0


@pytest.mark.parametrize(
    "target",
    [
        "http://user:pw@{host}:{port}/text",
        "http://{host}@{host}:{port}/text",
        "http://{host}:{port}\\@evil.test/text",
        "http://{host}:{port}/te xt",
        "{host}:{port}/text",
        "/text",
    ],
)
async def test_malformed_urls_and_credentials_are_refused_as_invalid_arguments(
    server: _Server,
    target: str,
) -> None:
    envelope = await fetch(
        local_config(server.port), {"url": target.format(host=HOST, port=server.port)}
    )
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.retryable
    assert server.connections == 0


async def test_a_port_that_is_not_allowed_is_refused(server: _Server) -> None:
    config = HttpConfig(domains=(HOST,), schemes=frozenset({"http"}))
    envelope = await fetch(config, {"url": url(server, "/text")})
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert server.connections == 0


async def test_a_host_that_does_not_resolve_is_not_found(server: _Server) -> None:
    config = local_config(server.port, domains=("*",))
    envelope = await fetch(config, {"url": url(server, "/text", host="missing.test")})
    assert envelope.error_type is ErrorCode.NOT_FOUND


async def test_a_failing_resolver_is_a_transient_failure(server: _Server) -> None:
    class Broken:
        async def resolve(self, host: str) -> tuple[IPAddress, ...]:
            raise OSError("resolver down")

    envelope = await fetch(
        local_config(server.port), {"url": url(server, "/text")}, resolver=Broken()
    )
    assert envelope.error_type is ErrorCode.TRANSIENT


async def test_an_unreachable_server_is_a_transient_failure() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port any more.
    envelope = await fetch(local_config(port), {"url": f"http://{HOST}:{port}/"})
    assert envelope.error_type is ErrorCode.TRANSIENT


async def test_an_allowlisted_ip_literal_is_fetched_with_the_address_as_host(
    server: _Server,
    connections: list[tuple[str, int]],
) -> None:
    config = local_config(server.port, domains=("127.0.0.1",))
    resolver = _Recording({})
    envelope = await fetch(
        config, {"url": url(server, "/host", host="127.0.0.1")}, resolver=resolver
    )
    assert envelope.status is Status.OK
    assert server.seen[0].headers["Host"] == f"127.0.0.1:{server.port}"
    assert resolver.queries == []
    assert connections == [("127.0.0.1", server.port)]


async def test_every_resolved_address_is_checked_even_beyond_those_tried(
    server: _Server,
    connections: list[tuple[str, int]],
) -> None:
    config = replace(
        local_config(server.port),
        allowances=(AddressAllowance(network="127.0.0.0/8", ports=frozenset({server.port})),),
    )
    many = [f"127.0.0.{i}" for i in range(1, 41)]
    envelope = await fetch(
        config,
        {"url": url(server, "/text")},
        resolver=StaticResolver({HOST: [*many, "10.0.0.5"]}),
    )
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert connections == []
    allowed = await fetch(
        config, {"url": url(server, "/text")}, resolver=StaticResolver({HOST: many})
    )
    assert allowed.status is Status.OK
    assert connections == [("127.0.0.1", server.port)]


async def test_the_next_vetted_address_is_tried_when_one_refuses_connections(
    server: _Server,
    connections: list[tuple[str, int]],
) -> None:
    config = replace(
        local_config(server.port),
        allowances=(AddressAllowance(network="127.0.0.0/8", ports=frozenset({server.port})),),
    )
    resolver = StaticResolver({HOST: ["127.0.0.2", "127.0.0.1"]})
    envelope = await fetch(config, {"url": url(server, "/text")}, resolver=resolver)
    assert envelope.status is Status.OK
    assert connections == [("127.0.0.2", server.port), ("127.0.0.1", server.port)]


# --- TLS: the name in SNI and in the certificate check ---------------------------------------


@dataclass
class _Tls:
    server: ssl.SSLContext
    client: ssl.SSLContext


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> _Tls:
    """A throwaway CA and a certificate for allowed.test only."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "handrail test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder: Path = tmp_path_factory.mktemp("tls")
    (folder / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (folder / "leaf.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(folder / "leaf.pem", folder / "leaf.key")
    client = ssl.create_default_context(
        cadata=ca.public_bytes(serialization.Encoding.PEM).decode("ascii")
    )
    return _Tls(server=server, client=client)


@pytest.fixture
def tls_server(tls_pair: _Tls) -> Iterator[_Server]:
    names: list[str | None] = []

    def remember(connection: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        names.append(name)

    tls_pair.server.sni_callback = remember
    with serving(dict(ROUTES), tls=tls_pair.server) as running:
        running.server_names = names
        yield running


async def test_https_sends_the_name_in_sni_and_host_while_connecting_to_the_address(
    tls_server: _Server,
    tls_pair: _Tls,
    connections: list[tuple[str, int]],
) -> None:
    config = local_config(tls_server.port, schemes=frozenset({"https"}))
    envelope = await fetch(
        config, {"url": f"https://{HOST}:{tls_server.port}/host"}, tls=tls_pair.client
    )
    assert envelope.status is Status.OK
    assert envelope.data["text"] == f"{HOST}:{tls_server.port}"
    assert tls_server.server_names == [HOST]
    assert connections == [("127.0.0.1", tls_server.port)]


async def test_a_certificate_for_another_name_is_refused(
    tls_server: _Server,
    tls_pair: _Tls,
) -> None:
    other = "other.test"
    config = local_config(tls_server.port, schemes=frozenset({"https"}), domains=(other,))
    envelope = await fetch(
        config,
        {"url": f"https://{other}:{tls_server.port}/host"},
        resolver=StaticResolver({other: ["127.0.0.1"]}),
        tls=tls_pair.client,
    )
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert tls_server.seen == []


# --- the tool's declaration ------------------------------------------------------------------


def test_http_fetch_is_a_read_with_untrusted_results_and_only_the_configured_methods() -> None:
    [fetch_tool] = http_tools(HttpConfig(domains=("example.com",)))
    spec = fetch_tool.spec
    assert spec.name == "web.http_fetch"
    assert spec.risk is RiskLevel.L1_INTERNAL_READ
    assert spec.side_effect is SideEffect.NONE
    assert spec.results.trust is Trust.UNTRUSTED
    assert spec.results.source == "web"
    properties = spec.input_schema["properties"]
    assert properties["method"]["enum"] == ["GET", "HEAD"]
    assert properties["url"]["maxLength"] == 2048
    assert "example.com" in spec.description
    assert "only the status and headers" in spec.description
    [refusing] = http_tools(HttpConfig(domains=("example.com",), other_content=OtherContent.REFUSE))
    assert "other content types are refused" in refusing.spec.description


def test_a_head_only_configuration_defaults_to_head_in_its_own_namespace() -> None:
    [fetch_tool] = http_tools(
        HttpConfig(domains=("example.com",), methods=frozenset({"HEAD"})), namespace="docs"
    )
    properties = fetch_tool.spec.input_schema["properties"]
    assert fetch_tool.name == "docs.http_fetch"
    assert properties["method"]["const"] == "HEAD"
    assert properties["method"]["default"] == "HEAD"


def test_a_long_allowlist_is_abbreviated_in_the_description() -> None:
    domains = tuple(f"h{i}.example.com" for i in range(30))
    [fetch_tool] = http_tools(HttpConfig(domains=domains))
    assert "h19.example.com, ..." in fetch_tool.spec.description
    assert "h20.example.com" not in fetch_tool.spec.description


@pytest.mark.parametrize(
    "options",
    [
        {"domains": "example.com"},
        {"domains": ()},
        {"domains": ("exa mple.com",)},
        {"domains": ("*.",)},
        {"schemes": frozenset({"ftp"})},
        {"schemes": frozenset()},
        {"methods": frozenset({"GET", "POST"})},
        {"methods": frozenset()},
        {"ports": frozenset({0})},
        {"max_redirects": -1},
        {"max_redirects": 21},
        {"timeout": 0},
        {"timeout": 301},
        {"max_bytes": 0},
        {"content_types": ("text",)},
    ],
)
def test_configurations_that_make_no_sense_are_refused(options: dict[str, Any]) -> None:
    options.setdefault("domains", ("example.com",))
    with pytest.raises(ConfigurationError):
        HttpConfig(**options)


@pytest.mark.parametrize(
    ("network", "ports"),
    [
        ("169.254.169.254/32", {80}),
        ("169.254.0.0/16", {80}),
        ("0.0.0.0/0", {80}),
        ("100.100.100.200/32", {80}),
        ("fd00:ec2::254/128", {80}),
        ("::/0", {80}),
        ("fe80::/10", {80}),
        ("127.0.0.1/32", set()),
        ("127.0.0.1/32", {0}),
        ("127.0.0.1/33", {80}),
        ("10.0.0.1/8", {80}),
    ],
)
def test_allowances_for_metadata_or_without_ports_are_refused(
    network: str,
    ports: set[int],
) -> None:
    with pytest.raises(ConfigurationError):
        AddressAllowance(network=network, ports=frozenset(ports))


def test_a_static_resolver_refuses_entries_that_are_not_addresses() -> None:
    with pytest.raises(ConfigurationError):
        StaticResolver({HOST: ["not-an-address"]})


# --- resolvers -------------------------------------------------------------------------------


async def test_the_system_resolver_resolves_localhost_to_loopback() -> None:
    found = await SystemResolver().resolve("localhost")
    assert ipaddress.ip_address("127.0.0.1") in found or ipaddress.ip_address("::1") in found


async def test_the_system_resolver_reports_a_missing_name_as_empty_and_a_failure_as_oserror(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "no such name")

    def broken(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_AGAIN, "try again")

    monkeypatch.setattr(socket, "getaddrinfo", missing)
    assert await SystemResolver().resolve("missing.test") == ()
    monkeypatch.setattr(socket, "getaddrinfo", broken)
    with pytest.raises(OSError, match="try again"):
        await SystemResolver().resolve("missing.test")


# --- URL parsing -----------------------------------------------------------------------------

SCHEMES = frozenset({"http", "https"})


@pytest.mark.parametrize(
    ("text", "host", "port", "path", "authority"),
    [
        ("https://Example.COM", "example.com", 443, "/", "example.com"),
        ("https://example.com.:443/a?b=1#frag", "example.com", 443, "/a?b=1", "example.com"),
        ("http://example.com:/x", "example.com", 80, "/x", "example.com"),
        ("https://bücher.de/straße", "xn--bcher-kva.de", 443, "/stra%C3%9Fe", "xn--bcher-kva.de"),
        ("https://example.com?q", "example.com", 443, "/?q", "example.com"),
        ("https://example.com:8443/%41", "example.com", 8443, "/%41", "example.com:8443"),
        ("https://[::1]:8443/", "::1", 8443, "/", "[::1]:8443"),
        ("https://[2001:DB8::1]/", "2001:db8::1", 443, "/", "[2001:db8::1]"),
        ("http://0x7f.1/", "127.0.0.1", 80, "/", "127.0.0.1"),
    ],
)
def test_urls_are_normalized(text: str, host: str, port: int, path: str, authority: str) -> None:
    target = parse_target(text, schemes=SCHEMES)
    assert (target.host, target.port, target.path, target.authority) == (
        host,
        port,
        path,
        authority,
    )


@pytest.mark.parametrize(
    "text",
    [
        "example.com",
        "https:example.com",
        "https:///path",
        "https://",
        "https://ex ample.com/",
        "https://example.com/\x00",
        "https://example.com\\@evil.com/",
        "https://user@example.com/",
        "https://:pw@example.com/",
        "https://example.com:0/",
        "https://example.com:65536/",
        "https://example.com:\uff18\uff10/",  # fullwidth digits
        "https://example.com:80:80/",
        "https://[::1/",
        "https://[::1]x/",
        "https://[fe80::1%25eth0]/",
        "https://[not-v6]/",
        "https://ex%61mple.com/",
        "https://a..b/",
        "https://-a.com/",
        "https://a_b.com/",
        "https://1.2.3.4.5/",
        "https://256.1.1.1/",
        "https://0x100000000/",
        "https://example.123/",
        "https://" + "a" * 64 + ".com/",
        "https://example.com/" + "a" * 2048,
    ],
)
def test_malformed_urls_are_invalid_arguments(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_target(text, schemes=SCHEMES)


@pytest.mark.parametrize(
    "text",
    ["file:///etc/passwd", "gopher://example.com/", "ftp://example.com/", "http://example.com/"],
)
def test_schemes_outside_the_allowlist_are_blocked(text: str) -> None:
    with pytest.raises(BlockedDestination) as caught:
        parse_target(text, schemes=frozenset({"https"}))
    assert caught.value.reason is BlockReason.SCHEME
    assert caught.value.code is ErrorCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0", "0.0.0.0"),  # noqa: S104 - an address parsed, not bound
        ("0x", "0.0.0.0"),  # noqa: S104 - same
        ("017700000001", "127.0.0.1"),
        ("169.254.43518", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("1.2.3.4.5", None),
        ("1.2.3.256", None),
        ("256.1.1.1", None),
        ("1.0x", "1.0.0.0"),
        ("09.1", None),
        ("abc.1", None),
    ],
)
def test_ipv4_hosts_parse_the_way_browsers_parse_them(text: str, address: str | None) -> None:
    parsed = whatwg_ipv4(text)
    assert (None if parsed is None else str(parsed)) == address


def _spellings(value: int) -> st.SearchStrategy[str]:
    octets = value.to_bytes(4, "big")

    def part(number: int, style: str) -> str:
        return {"dec": str(number), "oct": f"0{number:o}", "hex": f"0x{number:x}"}[style]

    def spell(styles: list[str], count: int) -> str:
        head = list(octets[: count - 1])
        last = int.from_bytes(octets[count - 1 :], "big")
        return ".".join(part(n, s) for n, s in zip([*head, last], styles, strict=False))

    return st.tuples(
        st.lists(st.sampled_from(["dec", "oct", "hex"]), min_size=4, max_size=4),
        st.integers(min_value=1, max_value=4),
    ).map(lambda pair: spell(pair[0], pair[1]))


@given(
    st.integers(min_value=0, max_value=2**32 - 1).flatmap(
        lambda v: st.tuples(st.just(v), _spellings(v))
    )
)
def test_every_spelling_of_an_ipv4_address_parses_to_that_address(pair: tuple[int, str]) -> None:
    value, text = pair
    target = parse_target(f"http://{text}/", schemes=SCHEMES)
    assert target.ip == ipaddress.IPv4Address(value)


@given(st.text(max_size=80))
def test_any_text_is_a_target_or_a_declared_refusal(text: str) -> None:
    try:
        target = parse_target(f"https://{text}", schemes=SCHEMES)
    except (InvalidArgument, BlockedDestination):
        return
    # What was accepted is plain ASCII with nothing that could split a request.
    assert target.url.isascii()
    assert not any(char in target.url for char in " \\\r\n\t@")


# --- the domain allowlist --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patterns", "host", "allowed"),
    [
        (("example.com",), "example.com", True),
        (("example.com",), "www.example.com", False),
        (("*.example.com",), "www.example.com", True),
        (("*.example.com",), "a.b.example.com", True),
        (("*.example.com",), "example.com", False),
        (("*.example.com",), "evilexample.com", False),
        (("*.Bücher.de",), "shop.xn--bcher-kva.de", True),
        (("*",), "anything.test", True),
        (("*",), "127.0.0.1", False),
        (("127.0.0.1",), "2130706433", True),
        (("[::1]",), "[::1]", True),
        (("::1",), "[::1]", True),
        (("example.com",), "127.0.0.1", False),
    ],
)
def test_the_domain_allowlist(patterns: tuple[str, ...], host: str, allowed: bool) -> None:
    allowlist = HostAllowlist.compile(patterns)
    target = parse_target(f"https://{host}/", schemes=SCHEMES)
    assert (allowlist.admits(target) is None) is allowed


# --- bodies ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "media", "charset"),
    [
        (None, None, None),
        ("", None, None),
        ('Text/HTML; Charset="UTF-8"', "text/html", "UTF-8"),
        ("application/json", "application/json", None),
        ("text/plain; charset=", "text/plain", None),
        ("not a type", None, None),
        ("text/plain; format=flowed; charset=latin-1", "text/plain", "latin-1"),
    ],
)
def test_content_type_headers_are_parsed(
    header: str | None,
    media: str | None,
    charset: str | None,
) -> None:
    assert parse_content_type(header) == (media, charset)


@pytest.mark.parametrize(
    ("media", "allowed"),
    [
        ("text/html", True),
        ("application/json", True),
        ("application/ld+json", True),
        ("application/atom+xml", True),
        ("application/octet-stream", False),
        ("image/svg+xml", False),
        (None, False),
    ],
)
def test_the_default_content_types(media: str | None, allowed: bool) -> None:
    config = HttpConfig(domains=("example.com",))
    assert media_allowed(media, config.content_types) is allowed


def test_a_star_pattern_allows_every_media_type() -> None:
    assert media_allowed("image/png", ("*/*",))


def test_the_bounded_decoder_never_returns_more_than_asked() -> None:
    bomb = gzip.compress(b"\0" * 5_000_000)
    decoder = BoundedDecoder("gzip")
    out, more = decoder.feed(bomb, 4096)
    assert len(out) == 4096
    assert more


def test_the_bounded_decoder_reads_several_gzip_members_and_zlib_deflate() -> None:
    two = gzip.compress(b"first ") + gzip.compress(b"second")
    assert BoundedDecoder("x-gzip").feed(two, 100) == (b"first second", False)
    assert BoundedDecoder("deflate").feed(zlib.compress(b"deflated"), 100) == (b"deflated", False)
    assert BoundedDecoder(None).feed(b"plain", 3) == (b"pla", True)


def test_the_bounded_decoder_decodes_a_stream_fed_in_pieces() -> None:
    packed = gzip.compress(b"one two three")
    decoder = BoundedDecoder("gzip")
    first, more = decoder.feed(packed[:12], 100)
    rest, more_after = decoder.feed(packed[12:], 100)
    assert first + rest == b"one two three"
    assert not more
    assert not more_after


def test_the_bounded_decoder_refuses_unknown_encodings_and_bad_data() -> None:
    with pytest.raises(UnsupportedEncodingError):
        BoundedDecoder("br")
    with pytest.raises(UnsupportedEncodingError):
        BoundedDecoder("gzip").feed(b"not gzip at all", 100)


@pytest.mark.parametrize(
    ("data", "declared", "complete", "text", "codec"),
    [
        ("café".encode(), None, True, "café", "utf-8"),
        ("café".encode(), "no-such-charset", True, "café", "utf-8"),
        ("café".encode(), "zlib", True, "café", "utf-8"),
        ("café".encode(), "base64", True, "café", "utf-8"),
        ("caf\xe9".encode("latin-1"), "ISO-8859-1", True, "café", "iso8859-1"),
        ("café".encode()[:-1], None, False, "caf", "utf-8"),
        (b"\xff\xfe", "utf-8", True, "\ufffd\ufffd", "utf-8"),
    ],
)
def test_text_is_decoded_from_the_declared_or_a_safe_charset(
    data: bytes,
    declared: str | None,
    complete: bool,
    text: str,
    codec: str,
) -> None:
    assert decode_text(data, declared, complete=complete) == (text, codec)


def test_text_in_an_undeclared_legacy_charset_is_detected() -> None:
    data = ("Приветствую вас, дорогие друзья! " * 20).encode("cp1251")
    text, codec = decode_text(data, None, complete=True)
    assert codec != "utf-8"
    assert "Приветствую" in text
