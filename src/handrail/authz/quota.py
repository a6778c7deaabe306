"""Rate limits and quotas: how often a tool may run, per tool, tenant and principal.

The gate asks a `Limiter` after authorization and before execution, so a denied call
never spends quota. `QuotaPolicy` says which rates apply; `RateLimiter` counts calls in
a `limits` storage, in process for one instance or in Redis for several. Limiters never
authorize and never run tools. `limits` (and its Redis client) loads when a limiter or a
parsed rate is first made, not on import.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from handrail.errors import ConfigurationError, StoreError
from handrail.principal import Principal
from handrail.spec import ToolSpec

if TYPE_CHECKING:
    from limits import RateLimitItem
    from limits.aio.storage import Storage

__all__ = [
    "Limit",
    "Limiter",
    "Quota",
    "QuotaPolicy",
    "Rate",
    "RateLimiter",
    "Scope",
    "TenantQuota",
    "bucket_identifiers",
    "declared_rates",
]

_NAMESPACE = "handrail"
_REDIS_SCHEMES = ("redis://", "rediss://", "async+redis://", "async+rediss://")


class Limiter(Protocol):
    """Counts calls against limits; says how long to wait when one is reached."""

    async def acquire(self, principal: Principal, spec: ToolSpec) -> float | None:
        """Take one unit for this call: None if allowed, else seconds until a retry may pass.

        The tool's own `rate_limit` (`declared_rates(spec)`) is one of the limits.
        """
        ...


class Scope(StrEnum):
    """Who shares one bucket. Every bucket belongs to one tenant; none spans tenants.

    Declared from the narrowest to the broadest: the order in which a call takes its
    units (see `RateLimiter`).
    """

    PRINCIPAL_TOOL = "principal_tool"
    """One user of one tenant, calling one tool."""
    PRINCIPAL = "principal"
    """One user of one tenant, across all tools."""
    TOOL = "tool"
    """Every caller of one tool within one tenant."""
    TENANT = "tenant"
    """Every call of one tenant, across all tools and users."""


_ORDER = {scope: position for position, scope in enumerate(Scope)}
_TOOL_SCOPES = frozenset({Scope.PRINCIPAL_TOOL, Scope.TOOL})


@dataclass(frozen=True, kw_only=True, slots=True)
class Rate:
    """At most `amount` calls in any window of `seconds` (a moving window, not a calendar one).

    `Rate.parse("10/minute")` reads the notation of the `limits` library; a rate is kept
    in seconds, so "10/minute" and "10 per 60 seconds" are the same rate and bucket.
    """

    amount: int
    seconds: int

    def __post_init__(self) -> None:
        if self.amount < 1 or self.seconds < 1:
            raise ConfigurationError(
                f"a rate needs at least one call in at least one second, not "
                f"{self.amount} per {self.seconds}s",
            )

    @classmethod
    def parse(cls, text: str) -> Rate:
        """Read one rate such as "10/minute", "100 per hour" or "5/30 seconds"."""
        from limits import parse  # noqa: PLC0415 - on first use, not on import

        try:
            item = parse(text)
        except ValueError as exc:
            raise ConfigurationError(f"not a rate: {text!r}") from exc
        return cls(amount=item.amount, seconds=item.get_expiry())

    @classmethod
    def parse_many(cls, text: str) -> tuple[Rate, ...]:
        """Read one or more rates separated by ';' or ',' ("10/minute;1000/day"), distinct.

        `parse` keeps only the first of several rates; a declared rate must never lose
        one silently, so declarations are read with this.
        """
        from limits import parse_many  # noqa: PLC0415 - on first use, not on import

        try:
            items = parse_many(text)
        except ValueError as exc:
            raise ConfigurationError(f"not a rate: {text[:80]!r}") from exc
        # `parse_many` refuses a text without any rate, so there is always one.
        return tuple(dict.fromkeys(cls(amount=i.amount, seconds=i.get_expiry()) for i in items))

    def __str__(self) -> str:
        return f"{self.amount} per {self.seconds} seconds"


@dataclass(frozen=True, kw_only=True, slots=True)
class Limit:
    """One rate applied in one scope: a bucket per tenant, user or tool as the scope says."""

    scope: Scope
    rate: Rate


Rates = tuple[Rate, ...]


def declared_rates(spec: ToolSpec) -> Rates | None:
    """The per-tool rates a spec declares in `rate_limit`, or None when it declares none.

    Registration has parsed the text already (`ToolSpec` refuses one that is not a
    rate), so this only reads it again.
    """
    return None if spec.rate_limit is None else _parsed(spec.rate_limit)


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> Rates:
    # Read on every call of a rate-limited tool; the same few texts recur.
    return Rate.parse_many(text)


@dataclass(frozen=True, kw_only=True, slots=True)
class Quota:
    """The rates of each scope, as one layer of a policy.

    A field left None inherits from the layer below; an empty tuple lifts that scope's
    limits; several rates in one scope all apply (for example 10/second and 1000/day).
    """

    per_principal_tool: Rates | None = None
    per_principal: Rates | None = None
    per_tool: Rates | None = None
    per_tenant: Rates | None = None

    def __post_init__(self) -> None:
        for scope in Scope:
            rates = self.rates(scope)
            if rates is None:
                continue
            if len(set(rates)) != len(rates):
                # Equal rates in one scope would share one bucket and count each call twice.
                raise ConfigurationError(f"a rate is listed twice for scope {scope}")
            object.__setattr__(self, _FIELDS[scope], tuple(rates))

    def rates(self, scope: Scope) -> Rates | None:
        """The rates this layer sets for `scope`; None when it inherits."""
        rates: Rates | None = getattr(self, _FIELDS[scope])
        return rates

    def over(self, base: Quota) -> Quota:
        """This layer laid over `base`: each scope this layer sets replaces base's rates."""
        return Quota(
            per_principal_tool=_first(self.per_principal_tool, base.per_principal_tool),
            per_principal=_first(self.per_principal, base.per_principal),
            per_tool=_first(self.per_tool, base.per_tool),
            per_tenant=_first(self.per_tenant, base.per_tenant),
        )

    def limits(self) -> tuple[Limit, ...]:
        """Every limit of this layer, narrowest scope first, shorter windows first."""
        return tuple(
            Limit(scope=scope, rate=rate)
            for scope in Scope
            for rate in sorted(self.rates(scope) or (), key=lambda r: (r.seconds, r.amount))
        )


_FIELDS = {
    Scope.PRINCIPAL_TOOL: "per_principal_tool",
    Scope.PRINCIPAL: "per_principal",
    Scope.TOOL: "per_tool",
    Scope.TENANT: "per_tenant",
}


def _first(value: Rates | None, fallback: Rates | None) -> Rates | None:
    return fallback if value is None else value


def _check_tool_layers(tools: Mapping[str, Quota], where: str) -> None:
    for name, layer in tools.items():
        if layer.per_principal is not None or layer.per_tenant is not None:
            # Those buckets span all tools; a per-tool rate for them would split or
            # share a bucket depending on the rate alone.
            raise ConfigurationError(
                f"{where} tool {name!r}: per_principal and per_tenant span all tools; "
                f"set them in a default layer",
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantQuota:
    """One tenant's exception to the policy: exempt from every limit, or other rates.

    `default` lays over the policy's defaults and per-tool layers; `tools` lays over
    all of those for one tool.
    """

    exempt: bool = False
    default: Quota = field(default_factory=Quota)
    tools: Mapping[str, Quota] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.exempt and (self.default != Quota() or self.tools):
            raise ConfigurationError("an exempt tenant has no limits to override")
        _check_tool_layers(self.tools, "tenant override for")
        object.__setattr__(self, "tools", MappingProxyType(dict(self.tools)))


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaPolicy:
    """Which limits apply to a call: defaults, per-tool layers, per-tenant exceptions.

    For tenant T calling tool X the layers are, from the bottom: `default`,
    `tools[X]`, `tenants[T].default`, `tenants[T].tools[X]`; an upper layer replaces a
    scope's rates and leaves the other scopes alone. Tool layers may set only the
    scopes that name a tool (`per_tool`, `per_principal_tool`).
    """

    default: Quota = field(default_factory=Quota)
    tools: Mapping[str, Quota] = field(default_factory=dict)
    tenants: Mapping[str, TenantQuota] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_tool_layers(self.tools, "policy for")
        object.__setattr__(self, "tools", MappingProxyType(dict(self.tools)))
        object.__setattr__(self, "tenants", MappingProxyType(dict(self.tenants)))

    def limits_for(
        self,
        tenant_id: str,
        tool: str,
        *,
        declared: Rates | None = None,
    ) -> tuple[Limit, ...]:
        """The limits a call of `tool` in `tenant_id` counts against, narrowest first.

        `declared` is the tool's own `rate_limit` (`declared_rates`): a `per_tool` layer
        between `default` and `tools[tool]`, so that the tool's author's rate holds
        unless the operator names this tool (or its tenant) with other rates.
        """
        tenant = self.tenants.get(tenant_id)
        if tenant is not None and tenant.exempt:
            return ()
        layer = self.default
        if declared is not None:
            layer = Quota(per_tool=declared).over(layer)
        layer = self.tools.get(tool, Quota()).over(layer)
        if tenant is not None:
            layer = tenant.default.over(layer)
            layer = tenant.tools.get(tool, Quota()).over(layer)
        return layer.limits()


@dataclass(frozen=True, slots=True)
class _Bucket:
    """One counter: the `limits` item for a rate and the identifiers that name its key."""

    item: RateLimitItem
    identifiers: tuple[str, ...]


def _part(value: str) -> str:
    # Percent-encoding with nothing kept safe is injective and leaves no '/' (the key
    # separator of `limits`), ':' or braces (Redis Cluster hash tags) in a part; lone
    # surrogates are encoded too rather than refused.
    return quote(value, safe="", errors="surrogatepass")


def bucket_identifiers(scope: Scope, principal: Principal, tool: str) -> tuple[str, ...]:
    """The identifiers of the bucket a call counts against in `scope`.

    Always the scope, then the tenant, then the user and tool where the scope names
    them, each percent-encoded: a tenant, user or tool containing separators can
    never spell another's key, and no two tenants ever share a bucket.
    """
    parts = [scope.value, _part(principal.tenant_id)]
    if scope in {Scope.PRINCIPAL, Scope.PRINCIPAL_TOOL}:
        parts.append(_part(principal.user_id))
    if scope in _TOOL_SCOPES:
        parts.append(_part(tool))
    return tuple(parts)


def _retry_after(reset_time: float, now: float, window: int) -> float:
    """Whole seconds until the window frees a unit: rounded up, at least 1, at most the window.

    Rounded up so that a retry after the hint never arrives early; at least 1 because
    the call was refused, even if the window turned over since.
    """
    return float(min(window, max(1, math.ceil(reset_time - now))))


class RateLimiter:
    """A `Limiter` on the moving-window strategy of the `limits` library.

    Moving window because a quota is a promise: at most N calls in *any* window, with no
    burst of 2N across a window boundary (fixed window) and no estimate (the sliding
    window counter assumes the previous window's calls were spread evenly). It costs
    one stored timestamp per call in the window, at most the rate's amount per bucket,
    which suits rates of up to some thousands per window.

    A call counts against every limit its `QuotaPolicy` names. Each storage operation is
    atomic per bucket (a Lua script in Redis, a lock in process), not across buckets.
    So the limiter first reads every bucket and refuses, spending nothing, if one is
    full; only then takes a unit from each, narrowest scope first, and stops at the
    first that refuses. No bucket ever admits more than its rate. The cost of not
    being atomic is the other way round, and only under contention: a call that loses
    a race between its read and its take keeps the units it already took from the
    narrower buckets (its user's, or its tool's when the tenant-wide bucket fills at
    that moment), at most one per bucket per lost race. The last bucket a call takes
    from, its broadest, never loses a unit, so a binding tenant-wide limit is filled
    exactly.

    `limits` keeps time with `time.time()`, and in Redis each instance stamps its own
    calls, so instances sharing Redis need synchronised clocks (NTP). Retry hints are
    computed on that scale, not from an injected `Clock`. Use one limiter per event loop.
    """

    def __init__(self, storage: Storage, *, policy: QuotaPolicy) -> None:
        """Count in `storage`, any `limits.aio` storage with moving-window support.

        Build it with `wrap_exceptions=True`, so that its failures become StoreError.
        """
        from limits import RateLimitItemPerSecond  # noqa: PLC0415 - on first use
        from limits.aio.storage import MovingWindowSupport  # noqa: PLC0415
        from limits.aio.strategies import MovingWindowRateLimiter  # noqa: PLC0415
        from limits.errors import StorageError  # noqa: PLC0415

        if not isinstance(storage, MovingWindowSupport):
            raise ConfigurationError(
                f"{type(storage).__name__} does not support the moving-window strategy",
            )
        self._storage = storage
        self._window = MovingWindowRateLimiter(storage)
        self._policy = policy
        self._item = RateLimitItemPerSecond
        self._storage_error = StorageError

    @classmethod
    def in_process(cls, *, policy: QuotaPolicy) -> RateLimiter:
        """Counts in this process's memory: the embedded default for one instance."""
        from limits.aio.storage import MemoryStorage  # noqa: PLC0415 - on first use

        return cls(MemoryStorage(), policy=policy)

    @classmethod
    def redis(
        cls,
        url: str,
        *,
        policy: QuotaPolicy,
        key_prefix: str = _NAMESPACE,
        timeout: float = 1.0,
    ) -> RateLimiter:
        """Counts in Redis (through coredis), so that every instance shares each bucket.

        `url` is `redis://host:port/db` or `rediss://…`, with or without the `async+`
        that `limits` spells. `key_prefix` starts every key, so that deployments (or
        test runs) sharing a server never share a bucket. `timeout` bounds connecting
        and each command, in seconds: a slow Redis must not hold calls indefinitely.
        """
        if not url.startswith(_REDIS_SCHEMES):
            raise ConfigurationError("a Redis URL starts with redis:// or rediss://")
        if not key_prefix or timeout <= 0:
            raise ConfigurationError("a Redis limiter needs a key prefix and a positive timeout")
        if not url.startswith("async+"):
            url = f"async+{url}"
        from limits.aio.storage import RedisStorage  # noqa: PLC0415 - loads coredis

        storage = RedisStorage(
            url,
            wrap_exceptions=True,
            implementation="coredis",
            key_prefix=key_prefix,
            connect_timeout=timeout,
            stream_timeout=timeout,
        )
        return cls(storage, policy=policy)

    @property
    def policy(self) -> QuotaPolicy:
        """The policy that says which limits apply."""
        return self._policy

    async def acquire(self, principal: Principal, spec: ToolSpec) -> float | None:
        """Take one unit from every bucket of this call, or none and say how long to wait.

        Raises StoreError when the storage fails: an unknown count refuses the call.
        """
        buckets = tuple(
            _Bucket(
                item=self._item(
                    limit.rate.amount,
                    limit.rate.seconds,
                    namespace=_NAMESPACE,
                ),
                identifiers=bucket_identifiers(limit.scope, principal, spec.name),
            )
            for limit in self._policy.limits_for(
                principal.tenant_id,
                spec.name,
                declared=declared_rates(spec),
            )
        )
        try:
            return await self._take(buckets)
        except self._storage_error as exc:
            raise StoreError("the rate-limit storage failed") from exc

    async def _take(self, buckets: tuple[_Bucket, ...]) -> float | None:
        if len(buckets) > 1:
            # Read first, so that a call refused by one bucket spends nothing in the others.
            stats = await asyncio.gather(
                *(self._window.get_window_stats(b.item, *b.identifiers) for b in buckets),
            )
            full = [(b, s) for b, s in zip(buckets, stats, strict=True) if s.remaining < 1]
            if full:
                now = time.time()
                return max(_retry_after(s.reset_time, now, b.item.get_expiry()) for b, s in full)
        for bucket in buckets:
            if not await self._window.hit(bucket.item, *bucket.identifiers):
                stats_now = await self._window.get_window_stats(bucket.item, *bucket.identifiers)
                return _retry_after(stats_now.reset_time, time.time(), bucket.item.get_expiry())
        return None

    @property
    def storage(self) -> Storage:
        """Where the counts live (Redis for several instances): other limits may count there."""
        return self._storage

    async def reachable(self) -> bool:
        """Whether the storage answers now (a Redis PING); False rather than an error."""
        return bool(await self._storage.check())

    async def aclose(self) -> None:
        """Release the storage's connections; the limiter is not used afterwards."""
        from limits.aio.storage import RedisStorage  # noqa: PLC0415 - on first use
        from limits.aio.storage.redis.coredis import CoredisBridge  # noqa: PLC0415

        if isinstance(self._storage, RedisStorage) and isinstance(
            self._storage.bridge,
            CoredisBridge,
        ):
            self._storage.bridge.get_connection().connection_pool.disconnect()
