"""The service's configuration: one TOML file, checked before anything opens.

`load_config(path)` reads `handrail.toml` (tables `[handrail]`, `[server]`, `[auth]`,
`[console]`) into a frozen `ServerConfig`. Relative file paths are taken from the
config file's folder, so a config means the same wherever `handrail serve` starts.
Secrets are never in the file: the keyring comes from a key file or the environment,
and the tools' credentials from the app itself: `registry` names a Registry, or an
object with `.registry` and optionally `.policy` and `.secrets` (the SecretProvider
its tools read through `ctx.secrets`; every worker scrubs what any worker handed out).
Several workers share one PostgreSQL `store` and, for rate limits, one `redis` with
their `redis_prefix` (one per deployment).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from handrail.errors import ConfigurationError

__all__ = [
    "AuthConfig",
    "ConsoleConfig",
    "HandrailConfig",
    "HttpConfig",
    "ServerConfig",
    "load_config",
]

_MAX_CONFIG_BYTES = 1_048_576


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HandrailConfig(_Frozen):
    """`[handrail]`: what is served and where it is kept."""

    registry: str = Field(
        description=(
            "module:attribute of a Registry, or of an object with `.registry` and optionally"
            " `.policy` and `.secrets` (a SecretProvider), or of a callable returning either"
        )
    )
    store: str = Field(
        default="sqlite:///.handrail/handrail.db",
        description="a SQLite path or URL (one instance) or a postgresql:// URL (several)",
    )
    keyring: Path | None = Field(
        default=None,
        description=(
            "KEY_ID:SECRET lines signing confirmation tokens; HANDRAIL_CONFIRMATION_KEYS if unset"
        ),
    )
    redis: str | None = Field(
        default=None, description="redis:// URL for limits shared by every worker (optional)"
    )
    redis_prefix: str = Field(
        default="handrail",
        pattern=r"^[A-Za-z0-9._:-]{1,64}$",
        description="starts every Redis key: one per deployment sharing a Redis",
    )
    migrate: bool = True


class HttpConfig(_Frozen):
    """`[server]`: where the service listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str | None = Field(
        default=None,
        description="the URL people and clients reach the service at (default http://host:port)",
    )
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    request_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    idempotency_seconds: int = Field(
        default=86_400, ge=60, description="how long a stored response answers its key"
    )
    worker_id: str | None = Field(
        default=None, description="this process's name in leases (default: host:pid)"
    )

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            msg = "public_url must be an http:// or https:// URL"
            raise ValueError(msg)
        return None if value is None else value.rstrip("/")

    def url(self) -> str:
        """The public URL, or http://host:port."""
        if self.public_url is not None:
            return self.public_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


class AuthConfig(_Frozen):
    """`[auth]`: how machine clients prove who they are (bearer tokens)."""

    api_keys: bool = True
    jwt_issuer: str | None = None
    jwks: Path | None = None
    jwt_audience: str | None = None
    tenant_claim: str = "tenant"


class ConsoleConfig(_Frozen):
    """`[console]`: the people's console (login, sessions, lock-out)."""

    enabled: bool = True
    session_minutes: int = Field(default=480, ge=5, le=10_080, description="absolute lifetime")
    idle_minutes: int = Field(default=30, ge=1, le=1_440)
    secure_cookies: Literal["auto", "always", "never"] = Field(
        default="auto", description="auto: Secure when public_url is https"
    )
    max_failed_logins: int = Field(default=5, ge=1, le=100)
    lockout_minutes: int = Field(default=15, ge=1, le=1_440)
    login_rate: str = Field(
        default="20/minute", description="login attempts per client address (limits syntax)"
    )


class ServerConfig(_Frozen):
    """The whole configuration of `handrail serve`."""

    handrail: HandrailConfig
    server: HttpConfig = HttpConfig()
    auth: AuthConfig = AuthConfig()
    console: ConsoleConfig = ConsoleConfig()
    source: Path | None = Field(default=None, exclude=True)

    def secure_cookies(self) -> bool:
        """Whether session cookies carry Secure."""
        match self.console.secure_cookies:
            case "always":
                return True
            case "never":
                return False
            case _:
                return self.server.url().startswith("https://")


def load_config(path: str | Path) -> ServerConfig:
    """`ServerConfig` from a TOML file; ConfigurationError naming what is wrong."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > _MAX_CONFIG_BYTES:
            raise ConfigurationError(f"{file}: a config file is at most 1 MiB")
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"{file}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{file}: not TOML: {exc}") from None
    try:
        config = ServerConfig.model_validate({**data, "source": file})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise ConfigurationError(f"{file}: {problems}") from None
    return _relative_to(config, file.resolve().parent)


def _relative_to(config: ServerConfig, folder: Path) -> ServerConfig:
    """Relative file paths (and a relative SQLite store) taken from the config's folder."""

    def anchored(path: Path | None) -> Path | None:
        return None if path is None or path.is_absolute() else folder / path

    handrail = config.handrail
    store = handrail.store
    if store.startswith("sqlite:///") and not store.startswith("sqlite:////"):
        store = f"sqlite:///{folder / store.removeprefix('sqlite:///')}"
    elif "://" not in store and not Path(store).is_absolute():
        store = str(folder / store)
    updates_h: dict[str, object] = {"store": store}
    if (keyring := anchored(handrail.keyring)) is not None:
        updates_h["keyring"] = keyring
    updates_a: dict[str, object] = {}
    if (jwks := anchored(config.auth.jwks)) is not None:
        updates_a["jwks"] = jwks
    return config.model_copy(
        update={
            "handrail": handrail.model_copy(update=updates_h),
            "auth": config.auth.model_copy(update=updates_a),
        }
    )
