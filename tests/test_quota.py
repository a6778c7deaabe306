"""Quota declarations, bucket keys, and the contract every RateLimiter storage passes.

Contract tests run against the in-process limiter and the Redis limiter alike. The
Redis half skips when no Redis answers at 127.0.0.1:6379, except under CI=true, where
that is a failure.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field

from handrail import (
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    ToolCall,
    ToolSpec,
    tool,
)
from handrail.authz.quota import (
    Limit,
    Quota,
    QuotaPolicy,
    Rate,
    RateLimiter,
    Scope,
    TenantQuota,
    bucket_identifiers,
)
from handrail.errors import ConfigurationError, StoreError
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
HOUR = 3600

MakeLimiter = Callable[[QuotaPolicy], RateLimiter]


def _spec(name: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description="A tool that reads.",
        input_schema={"type": "object"},
        schema_version="1",
        description_version="1",
        risk=RiskLevel.L1_INTERNAL_READ,
        side_effect=SideEffect.NONE,
    )


def _user(user_id: str, tenant_id: str = "t1") -> Principal:
    return Principal(user_id=user_id, tenant_id=tenant_id)


def _per_hour(amount: int) -> tuple[Rate, ...]:
    return (Rate(amount=amount, seconds=HOUR),)


SEARCH = _spec("shop.search")
STOCK = _spec("shop.stock")
ALICE = _user("alice")
BOB = _user("bob")
MALLORY = _user("mallory", "t2")


async def _allowed(limiter: RateLimiter, principal: Principal, spec: ToolSpec, calls: int) -> int:
    """How many of `calls` sequential acquires were allowed."""
    return sum([await limiter.acquire(principal, spec) is None for _ in range(calls)])


# --- declarations --------------------------------------------------------------------------


def test_a_rate_reads_the_limits_notation_and_is_kept_in_seconds() -> None:
    assert Rate.parse("10/minute") == Rate(amount=10, seconds=60)
    assert Rate.parse("10 per 60 seconds") == Rate(amount=10, seconds=60)
    assert Rate.parse("5/2 hours") == Rate(amount=5, seconds=7200)
    assert str(Rate.parse("1/day")) == "1 per 86400 seconds"


@pytest.mark.parametrize("text", ["", "ten/minute", "10/fortnight", "0/minute", "10"])
def test_a_rate_that_cannot_be_read_or_allows_nothing_is_a_configuration_error(
    text: str,
) -> None:
    with pytest.raises(ConfigurationError):
        Rate.parse(text)


@pytest.mark.parametrize(("amount", "seconds"), [(0, 60), (-1, 60), (1, 0), (1, -5)])
def test_a_rate_needs_a_positive_amount_and_window(amount: int, seconds: int) -> None:
    with pytest.raises(ConfigurationError):
        Rate(amount=amount, seconds=seconds)


def test_a_rate_listed_twice_in_one_scope_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        Quota(per_principal=(Rate.parse("1/second"), Rate.parse("1 per 1 second")))


def test_limits_come_narrowest_scope_first_and_shorter_windows_first() -> None:
    day, second = Rate.parse("1000/day"), Rate.parse("10/second")
    quota = Quota(
        per_tenant=(Rate.parse("5000/day"),),
        per_tool=_per_hour(100),
        per_principal=(day, second),
        per_principal_tool=_per_hour(10),
    )
    assert [(limit.scope, limit.rate) for limit in quota.limits()] == [
        (Scope.PRINCIPAL_TOOL, Rate(amount=10, seconds=HOUR)),
        (Scope.PRINCIPAL, second),
        (Scope.PRINCIPAL, day),
        (Scope.TOOL, Rate(amount=100, seconds=HOUR)),
        (Scope.TENANT, Rate.parse("5000/day")),
    ]


def test_policy_layers_replace_a_scope_and_leave_the_other_scopes_alone() -> None:
    policy = QuotaPolicy(
        default=Quota(per_principal=_per_hour(60), per_tenant=_per_hour(1000)),
        tools={"shop.search": Quota(per_tool=_per_hour(100), per_principal_tool=_per_hour(10))},
        tenants={
            "big": TenantQuota(
                default=Quota(per_tenant=_per_hour(10_000)),
                tools={"shop.search": Quota(per_tool=())},
            ),
        },
    )

    def limits(tenant: str, tool_name: str) -> set[Limit]:
        return set(policy.limits_for(tenant, tool_name))

    principal = Limit(scope=Scope.PRINCIPAL, rate=Rate(amount=60, seconds=HOUR))
    tenant = Limit(scope=Scope.TENANT, rate=Rate(amount=1000, seconds=HOUR))
    search_tool = Limit(scope=Scope.TOOL, rate=Rate(amount=100, seconds=HOUR))
    search_user = Limit(scope=Scope.PRINCIPAL_TOOL, rate=Rate(amount=10, seconds=HOUR))
    big_tenant = Limit(scope=Scope.TENANT, rate=Rate(amount=10_000, seconds=HOUR))
    assert limits("t1", "shop.stock") == {principal, tenant}
    assert limits("t1", "shop.search") == {principal, tenant, search_tool, search_user}
    assert limits("big", "shop.stock") == {principal, big_tenant}
    assert limits("big", "shop.search") == {principal, big_tenant, search_user}


def test_an_exempt_tenant_has_no_limits_and_takes_no_overrides() -> None:
    policy = QuotaPolicy(
        default=Quota(per_principal=_per_hour(1)),
        tenants={"internal": TenantQuota(exempt=True)},
    )
    assert policy.limits_for("internal", "shop.search") == ()
    assert len(policy.limits_for("t1", "shop.search")) == 1
    with pytest.raises(ConfigurationError):
        TenantQuota(exempt=True, default=Quota(per_tenant=_per_hour(5)))
    with pytest.raises(ConfigurationError):
        TenantQuota(exempt=True, tools={"shop.search": Quota(per_tool=_per_hour(5))})


@pytest.mark.parametrize(
    "layer",
    [Quota(per_tenant=_per_hour(5)), Quota(per_principal=_per_hour(5))],
)
def test_a_tool_layer_may_not_set_limits_that_span_all_tools(layer: Quota) -> None:
    with pytest.raises(ConfigurationError):
        QuotaPolicy(tools={"shop.search": layer})
    with pytest.raises(ConfigurationError):
        TenantQuota(tools={"shop.search": layer})


def test_a_policy_cannot_be_changed_after_it_is_built() -> None:
    tools = {"shop.search": Quota(per_tool=_per_hour(5))}
    policy = QuotaPolicy(tools=tools, tenants={"t1": TenantQuota(tools=tools)})
    tools.clear()
    assert "shop.search" in policy.tools
    assert "shop.search" in policy.tenants["t1"].tools
    with pytest.raises(TypeError):
        policy.tools["shop.stock"] = Quota()  # type: ignore[index]
    with pytest.raises(AttributeError):
        policy.default = Quota()  # type: ignore[misc]


# --- keys ----------------------------------------------------------------------------------


def test_bucket_keys_always_name_the_tenant_and_only_the_parts_of_their_scope() -> None:
    assert bucket_identifiers(Scope.TENANT, ALICE, "shop.search") == ("tenant", "t1")
    assert bucket_identifiers(Scope.TOOL, ALICE, "shop.search") == ("tool", "t1", "shop.search")
    assert bucket_identifiers(Scope.PRINCIPAL, ALICE, "shop.search") == (
        "principal",
        "t1",
        "alice",
    )
    assert bucket_identifiers(Scope.PRINCIPAL_TOOL, ALICE, "shop.search") == (
        "principal_tool",
        "t1",
        "alice",
        "shop.search",
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (_user("b", "a/principal"), _user("principal/b", "a")),
        (_user("v", "t/u"), _user("u/v", "t")),
        (_user("x", "a%2Fb"), _user("x", "a/b")),
        (_user("{u}", "{t}"), _user("u", "t")),
        (_user("x:y", "t"), _user("y", "t:x")),
        (_user("\U0001f600", "t\u00e9"), _user("\u00e9", "t\U0001f600")),
    ],
)
def test_tenants_and_users_that_contain_separators_never_spell_each_others_keys(
    first: Principal,
    second: Principal,
) -> None:
    for scope in Scope:
        one = bucket_identifiers(scope, first, "shop.search")
        other = bucket_identifiers(scope, second, "shop.search")
        assert "/".join(one) != "/".join(other)
        assert not any(set(part) & set("/:{}") for part in one + other)


# Any text a Principal takes (it refuses NUL and lone surrogates, which no store holds).
_NAMES = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), min_size=1)


@given(tenants=st.tuples(_NAMES, _NAMES), users=st.tuples(_NAMES, _NAMES))
def test_two_callers_share_a_bucket_key_only_when_tenant_and_user_are_equal(
    tenants: tuple[str, str],
    users: tuple[str, str],
) -> None:
    first = Principal(user_id=users[0], tenant_id=tenants[0])
    second = Principal(user_id=users[1], tenant_id=tenants[1])
    for scope in (Scope.PRINCIPAL, Scope.PRINCIPAL_TOOL):
        same_key = "/".join(bucket_identifiers(scope, first, "shop.search")) == "/".join(
            bucket_identifiers(scope, second, "shop.search"),
        )
        assert same_key == (tenants[0] == tenants[1] and users[0] == users[1])


# --- the contract, on every storage ----------------------------------------------------------


@pytest.mark.anyio
async def test_a_call_with_no_applicable_limit_is_allowed(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(QuotaPolicy())
    assert await _allowed(limiter, ALICE, SEARCH, 20) == 20


@pytest.mark.anyio
async def test_a_principal_limit_holds_for_one_user_and_leaves_other_users_alone(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(QuotaPolicy(default=Quota(per_principal=_per_hour(3))))
    assert await _allowed(limiter, ALICE, SEARCH, 2) == 2
    assert await _allowed(limiter, ALICE, STOCK, 3) == 1
    assert await _allowed(limiter, BOB, SEARCH, 5) == 3
    assert await _allowed(limiter, _user("alice", "t2"), SEARCH, 5) == 3


@pytest.mark.anyio
async def test_a_tenant_limit_spans_its_users_and_tools_and_leaves_other_tenants_alone(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(QuotaPolicy(default=Quota(per_tenant=_per_hour(4))))
    assert await _allowed(limiter, ALICE, SEARCH, 2) == 2
    assert await _allowed(limiter, BOB, STOCK, 5) == 2
    assert await _allowed(limiter, ALICE, STOCK, 1) == 0
    assert await _allowed(limiter, MALLORY, SEARCH, 6) == 4


@pytest.mark.anyio
async def test_a_tool_limit_spans_the_tenants_users_and_leaves_other_tools_and_tenants_alone(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(QuotaPolicy(tools={"shop.search": Quota(per_tool=_per_hour(3))}))
    assert await _allowed(limiter, ALICE, SEARCH, 2) == 2
    assert await _allowed(limiter, BOB, SEARCH, 5) == 1
    assert await _allowed(limiter, ALICE, STOCK, 10) == 10
    assert await _allowed(limiter, MALLORY, SEARCH, 5) == 3


@pytest.mark.anyio
async def test_a_principal_tool_limit_counts_one_user_on_one_tool(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(QuotaPolicy(default=Quota(per_principal_tool=_per_hour(2))))
    assert await _allowed(limiter, ALICE, SEARCH, 5) == 2
    assert await _allowed(limiter, ALICE, STOCK, 5) == 2
    assert await _allowed(limiter, BOB, SEARCH, 5) == 2


@pytest.mark.anyio
async def test_a_tool_layer_replaces_the_default_for_that_tool_only(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(
        QuotaPolicy(
            default=Quota(per_principal_tool=_per_hour(2)),
            tools={"shop.search": Quota(per_principal_tool=_per_hour(5))},
        ),
    )
    assert await _allowed(limiter, ALICE, SEARCH, 10) == 5
    assert await _allowed(limiter, ALICE, STOCK, 10) == 2


@pytest.mark.anyio
async def test_a_tenant_can_be_given_more_or_be_exempt_without_changing_the_others(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(
        QuotaPolicy(
            default=Quota(per_tenant=_per_hour(2)),
            tenants={
                "big": TenantQuota(default=Quota(per_tenant=_per_hour(6))),
                "internal": TenantQuota(exempt=True),
            },
        ),
    )
    assert await _allowed(limiter, _user("u", "big"), SEARCH, 10) == 6
    assert await _allowed(limiter, _user("u", "internal"), SEARCH, 50) == 50
    assert await _allowed(limiter, ALICE, SEARCH, 10) == 2


@pytest.mark.anyio
async def test_a_call_refused_by_one_limit_spends_nothing_in_the_others(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(
        QuotaPolicy(default=Quota(per_principal=_per_hour(2), per_tenant=_per_hour(3))),
    )
    assert await _allowed(limiter, ALICE, SEARCH, 20) == 2
    # Alice's 18 refused calls left the tenant's last unit to Bob.
    assert await _allowed(limiter, BOB, SEARCH, 10) == 1


@pytest.mark.anyio
async def test_a_refused_call_is_told_to_wait_whole_seconds_within_the_window(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(
        QuotaPolicy(
            default=Quota(per_principal=(Rate(amount=2, seconds=60),)),
            tools={"shop.search": Quota(per_tool=(Rate(amount=1, seconds=30),))},
        ),
    )
    assert await limiter.acquire(ALICE, STOCK) is None
    assert await limiter.acquire(ALICE, SEARCH) is None
    # Refused by the principal's full 60-second window and the tool's full 30-second one:
    # the wait is for the later of the two.
    by_both = await limiter.acquire(ALICE, SEARCH)
    by_tool = await limiter.acquire(BOB, SEARCH)
    assert by_both is not None
    assert by_tool is not None
    assert by_both.is_integer()
    assert by_tool.is_integer()
    assert 58 <= by_both <= 60
    assert 28 <= by_tool <= 30


@pytest.mark.anyio
async def test_a_retry_after_the_hint_passes(make_limiter: MakeLimiter) -> None:
    # One-second windows: the only test that waits, because the hint is what it checks.
    limiter = make_limiter(QuotaPolicy(default=Quota(per_principal=(Rate(amount=1, seconds=1),))))
    assert await limiter.acquire(ALICE, SEARCH) is None
    wait = await limiter.acquire(ALICE, SEARCH)
    assert wait == 1.0
    with anyio.fail_after(3):
        await anyio.sleep(wait)
        assert await limiter.acquire(ALICE, SEARCH) is None


@pytest.mark.anyio
async def test_the_gate_refuses_retryably_after_the_limit_and_runs_the_tool_that_often(
    make_limiter: MakeLimiter,
) -> None:
    runs: list[int] = []

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="shop")
    async def lookup(n: Annotated[int, Field(ge=0)] = 0) -> int:
        """Return n."""
        runs.append(n)
        return n

    registry = Registry()
    registry.register(lookup)
    audit = MemoryAuditSink()
    limiter = make_limiter(QuotaPolicy(default=Quota(per_principal=(Rate.parse("3/minute"),))))
    gate = Gate(registry, limiter=limiter, audit=audit, clock=FixedClock(), new_id=sequential_ids())

    envelopes = [
        await gate.handle(ToolCall(id=f"c{n}", name=lookup.name, arguments={"n": n}), ALICE)
        for n in range(5)
    ]
    other = await gate.handle(ToolCall(id="b", name=lookup.name, arguments={"n": 9}), BOB)

    assert [e.status for e in envelopes] == [Status.OK] * 3 + [Status.ERROR] * 2
    assert [e.error_type for e in envelopes[3:]] == [ErrorCode.RATE_LIMITED] * 2
    assert all(e.retryable and e.retry_after is not None for e in envelopes[3:])
    assert all(1 <= (e.retry_after or 0) <= 60 for e in envelopes[3:])
    assert other.status is Status.OK
    assert runs == [0, 1, 2, 9]
    assert audit.for_call("c4")[-1].stage == "quota"
    assert audit.for_call("c4")[-1].decision == "refused"
    assert all(event.stage != "execute" for event in audit.for_call("c4"))


# --- Redis specifics ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_every_redis_key_starts_with_the_prefix_and_names_scope_and_tenant(
    redis_url: str,
    redis_keys: Callable[..., Awaitable[list[str]]],
) -> None:
    prefix = f"handrail-test-{uuid.uuid4().hex}"
    policy = QuotaPolicy(
        default=Quota(per_principal=_per_hour(5), per_tenant=_per_hour(9)),
        tools={"shop.search": Quota(per_tool=_per_hour(7))},
    )
    limiter = RateLimiter.redis(f"async+{redis_url}", policy=policy, key_prefix=prefix)
    try:
        assert await limiter.acquire(_user("a/b", "t:1"), SEARCH) is None
    finally:
        await limiter.aclose()
        keys = await redis_keys(prefix, delete=True)
    assert keys == [
        f"{prefix}:handrail/principal/t%3A1/a%2Fb/5/3600/second",
        f"{prefix}:handrail/tenant/t%3A1/9/3600/second",
        f"{prefix}:handrail/tool/t%3A1/shop.search/7/3600/second",
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "quota",
    [Quota(per_principal=_per_hour(5)), Quota(per_principal=_per_hour(5), per_tenant=_per_hour(9))],
)
async def test_an_unreachable_redis_refuses_with_a_store_error(quota: Quota) -> None:
    limiter = RateLimiter.redis(
        f"redis://{REDIS_HOST}:1",
        policy=QuotaPolicy(default=quota),
        timeout=0.5,
    )
    try:
        with anyio.fail_after(5), pytest.raises(StoreError):
            await limiter.acquire(ALICE, SEARCH)
    finally:
        await limiter.aclose()


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("memcached://127.0.0.1:11211", {}),
        ("127.0.0.1:6379", {}),
        ("redis://127.0.0.1:6379", {"key_prefix": ""}),
        ("redis://127.0.0.1:6379", {"timeout": 0}),
    ],
)
def test_a_redis_limiter_needs_a_redis_url_a_prefix_and_a_timeout(
    url: str,
    options: dict[str, str | float],
) -> None:
    with pytest.raises(ConfigurationError):
        RateLimiter.redis(url, policy=QuotaPolicy(), **options)  # type: ignore[arg-type]


def test_a_storage_without_a_moving_window_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        RateLimiter(object(), policy=QuotaPolicy())  # type: ignore[arg-type]


def test_a_limiter_shows_its_policy() -> None:
    policy = QuotaPolicy(default=Quota(per_tenant=_per_hour(1)))
    assert RateLimiter.in_process(policy=policy).policy is policy
