"""What every request handler of the service reaches: the parts, opened once per process.

`Services` is a frozen bundle (no globals): the application (`Handrail`: registry, gate,
writes, store, audit), the bearer authenticator for machine clients, the people's
authority for the console, the operations both faces share, the clock, this worker's
id and its telemetry. `open_services(config)` opens them from a `ServerConfig` (the
telemetry from the standard `OTEL_*` variables, once) and closes them on exit; tests
build a `Services` from parts they made themselves.
"""

from __future__ import annotations

import asyncio
import importlib
import operator
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from handrail.app import Handrail
from handrail.clock import Clock, SystemClock
from handrail.declare.registry import Registry
from handrail.errors import ConfigurationError
from handrail.principal import Principal
from handrail.server.config import ServerConfig

if TYPE_CHECKING:
    from starlette.requests import Request

    from handrail.authz.policy import Policy
    from handrail.credentials import SecretProvider
    from handrail.mcp.auth import Authenticator
    from handrail.server.operations import Operations
    from handrail.telemetry import Telemetry
    from handrail.writes.confirmation import Keyring

__all__ = [
    "Application",
    "PeopleAuthority",
    "Probe",
    "Services",
    "keyring_from",
    "load_application",
    "open_services",
]

Probe = Callable[[], Awaitable[bool]]
"""Whether one part the service needs (Redis, say) answers now; /readyz asks each."""

_PRIVATE = 0o077


class PeopleAuthority(Protocol):
    """The console's people: who a request's session cookie stands for.

    Implemented by the console (`handrail.server.console.people`). A session proves a
    person only while it is unexpired, unrevoked and its person enabled; the Principal
    is built from the stored person on every request, never from the request body.
    """

    async def principal_for(self, request: Request) -> Principal | None:
        """The person of the request's session, or None when it proves nothing."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Application:
    """What the config's registry factory gives: the tools, and what they may need.

    `secrets` is where the tools' credentials come from (`ctx.secrets`); every worker
    reads the same handles from its own provider, so each scrubs what any handed out.
    """

    registry: Registry
    policy: Policy | None = None
    secrets: SecretProvider | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Services:
    """The parts a request handler may use; built once per worker process."""

    config: ServerConfig
    handrail: Handrail
    bearer: Authenticator
    operations: Operations
    people: PeopleAuthority | None
    clock: Clock
    worker_id: str
    new_id: Callable[[], str]
    probes: Mapping[str, Probe] = field(default_factory=lambda: MappingProxyType({}))
    """Parts besides the store that /readyz checks, by name (Redis when configured)."""
    telemetry: Telemetry | None = None
    """Where the service's traces and metrics go (a SERVER span per request); None: nowhere."""


@asynccontextmanager
async def open_services(
    config: ServerConfig,
    *,
    clock: Clock | None = None,
    new_id: Callable[[], str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[Services]:
    """Open the store, the application and the authenticators the config names; close on exit.

    The registry (and policy) come from `config.handrail.registry`; the keyring from
    its file (which only its owner may read) or else the environment. State that must
    hold across workers (guard counts, secret handles, run leases; limits in Redis when
    `redis` is set) goes through `server.shared`; the console's people are served when
    the console is on; ended sessions and expired idempotency records are purged in the
    background. The telemetry is built once from `environ`'s `OTEL_*` variables and
    shared by the request spans and the application. ConfigurationError says what is wrong.
    """
    from handrail.mcp.auth import bearer_authenticator  # noqa: PLC0415 - loads the mcp SDK
    from handrail.server.console.people import ConsolePeople  # noqa: PLC0415 - argon2
    from handrail.server.housekeeping import Housekeeping  # noqa: PLC0415
    from handrail.server.operations import Operations  # noqa: PLC0415 - imports the app
    from handrail.server.shared import shared_state  # noqa: PLC0415
    from handrail.store import open_store  # noqa: PLC0415

    clock = SystemClock() if clock is None else clock
    if (config.auth.jwt_issuer is None) != (config.auth.jwks is None):
        raise ConfigurationError("[auth] jwt_issuer and jwks (the JWKS file) go together")
    application = load_application(config.handrail.registry)
    env = os.environ if environ is None else environ
    keyring = keyring_from(config.handrail.keyring, env)
    worker_id = config.server.worker_id or f"{socket.gethostname()}:{os.getpid()}"
    telemetry = _telemetry_from(env)
    async with AsyncExitStack() as stack:
        if telemetry is not None:
            # Last out: flushes what the providers built from the environment still hold.
            stack.callback(telemetry.shutdown)
        store = await asyncio.to_thread(
            open_store, config.handrail.store, migrate=config.handrail.migrate
        )
        stack.callback(store.close)
        # Guard counts, handed-out secret handles and run leases in the store, limits in
        # Redis when configured: every worker of the service sees the same state.
        shared = await stack.enter_async_context(
            shared_state(
                store,
                redis_url=config.handrail.redis,
                redis_prefix=config.handrail.redis_prefix,
                clock=clock,
                worker_id=worker_id,
                secrets=application.secrets,
            )
        )
        probes: dict[str, Probe] = {}
        if shared.limiter is not None:
            probes["redis"] = shared.limiter.reachable
        app = Handrail.open(
            store,
            registry=application.registry,
            policy=application.policy,
            secrets=application.secrets,
            keyring=keyring,
            clock=clock,
            **shared.handrail_options(),
            # The service's own, read once above (False: none, not the environment again).
            telemetry=telemetry if telemetry is not None else False,
        )
        stack.push_async_callback(app.aclose)
        bearer = bearer_authenticator(
            app,
            api_keys=config.auth.api_keys,
            jwt_issuer=config.auth.jwt_issuer,
            jwks=config.auth.jwks,
            jwt_audience=config.auth.jwt_audience or config.server.url(),
            tenant_claim=config.auth.tenant_claim,
        )
        people = None
        if config.console.enabled:
            people = ConsolePeople(
                store,
                clock=clock,
                config=config.console,
                secure_cookies=config.secure_cookies(),
                # Logins per client counted where every worker counts (Redis), if set.
                rate_storage=None if shared.limiter is None else shared.limiter.storage,
            )
        housekeeping = Housekeeping(store, clock=clock)
        await housekeeping.start()
        stack.push_async_callback(housekeeping.stop)
        yield Services(
            config=config,
            handrail=app,
            bearer=bearer,
            operations=Operations(app, clock=clock, worker_id=worker_id),
            people=people,
            clock=clock,
            worker_id=worker_id,
            new_id=new_id or (lambda: uuid.uuid4().hex),
            probes=MappingProxyType(probes),
            telemetry=telemetry,
        )


def _telemetry_from(environ: Mapping[str, str]) -> Telemetry | None:
    """The service's telemetry as the standard `OTEL_*` variables configure it; None for none.

    Imported here, when serving: `handrail --help` loads no part of OpenTelemetry.
    """
    from handrail.telemetry import Telemetry  # noqa: PLC0415 - only when serving

    return Telemetry.from_environment(environ)


def load_application(target: str) -> Application:
    """The registry (and policy and secrets, if any) of `module:attribute`, imported like uvicorn.

    The attribute is a Registry, an object with `.registry` (and optionally `.policy`
    and `.secrets`, a SecretProvider), or a callable returning either. The current
    directory is on the import path.
    """
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigurationError(f"registry must look like module:attribute, not {target!r}")
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        found = operator.attrgetter(attribute)(importlib.import_module(module_name))
        if callable(found) and not isinstance(found, Registry):
            found = found()
    except Exception as exc:  # noqa: BLE001 - importing and building user code may raise anything
        raise ConfigurationError(
            f"registry {target}: {type(exc).__name__}: {exc}".replace("\n", " ")
        ) from None
    registry = found if isinstance(found, Registry) else getattr(found, "registry", None)
    if not isinstance(registry, Registry):
        raise ConfigurationError(
            f"registry {target} gave neither a Registry nor an object with one"
        )
    return Application(
        registry=registry,
        policy=getattr(found, "policy", None),
        secrets=getattr(found, "secrets", None),
    )


def keyring_from(path: Path | None, environ: Mapping[str, str]) -> Keyring | None:
    """The confirmation keys: the file (its owner's alone), else the environment, else None."""
    from handrail.writes.confirmation import KEYRING_ENV, Keyring  # noqa: PLC0415

    if path is not None:
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            raise ConfigurationError(f"cannot read the keyring {path}: {exc.strerror}") from None
        if os.name == "posix" and mode & _PRIVATE:
            raise ConfigurationError(f"the keyring {path} is readable by others; chmod 600 it")
        return Keyring.from_file(path)
    return Keyring.from_env(environ=environ) if environ.get(KEYRING_ENV) else None
