"""Confirmation under attack: only the requester's own, intact, unused, unexpired token confirms.

Every forged, altered, malformed, foreign, replayed or expired token is refused with its
own code, and a refusal changes nothing: the plan keeps its state and version and no
nonce is used up, so the legitimate token still works afterwards. A model cannot confirm
(chat text or a token pasted into arguments only makes another plan), never sees a token
or the signing secret, and cannot learn whether another tenant's plan exists. Approval
plans need distinct approvers other than the requester, and an approver's revision is a
new plan that no earlier token confirms.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from pydantic import Field

from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    ToolCall,
    ToolContext,
    tool,
)
from handrail.declare.definition import Tool
from handrail.declare.hooks import Found, NotExecuted, Reconciled
from handrail.errors import ToolRetryable, WriteRefusedError
from handrail.execution import ExecutionStatus, plan_key
from handrail.plans import PlanRecord, PlanState
from handrail.signing import SigningKey
from handrail.spec import ConfirmationMode, ConfirmationPolicy
from handrail.store import MemoryStore, Store
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.writes.confirmation import Keyring
from handrail.writes.outcome import WriteOutcome
from handrail.writes.reconcile import Reconciler
from handrail.writes.service import Writes

pytestmark = [pytest.mark.anyio, pytest.mark.invariant(3)]

Race = Callable[[int, Callable[[int], bool]], list[bool]]

SECRET = b"TOP-SECRET-confirmation-key-0123456789"
OTHER_SECRET = b"another-secret-of-the-same-length-0123"
K1 = SigningKey("k1", SECRET)
K2 = SigningKey("k2", b"the-rotated-in-secret-0123456789abcdef")
TTL = 300.0
RACERS = 16

OPS = frozenset({"ops.restart"})
ALICE = Principal(user_id="alice", tenant_id="t1", permissions=OPS | {"pay.refund", "pay.approve"})
BOB = Principal(user_id="bob", tenant_id="t1", permissions=OPS)
MALLORY = Principal(user_id="mallory", tenant_id="t2", permissions=OPS | {"pay.approve"})
CAROL = Principal(user_id="carol", tenant_id="t1", permissions=frozenset({"pay.approve"}))
DAVE = Principal(user_id="dave", tenant_id="t1", permissions=frozenset({"pay.approve"}))
FRANK = Principal(
    user_id="frank", tenant_id="t1", permissions=frozenset({"pay.approve", "pay.refund"})
)
ERIN = Principal(user_id="erin", tenant_id="t1", permissions=frozenset({"pay.refund"}))


@dataclass
class Kit:
    """One host: a registry of two writes, a store, a clock, and the downstream effects."""

    store: Store
    keyring: Keyring
    clock: FixedClock = field(default_factory=FixedClock)
    audit: MemoryAuditSink = field(default_factory=MemoryAuditSink)
    effects: dict[str, list[str]] = field(default_factory=dict)
    fail_next: list[BaseException] = field(default_factory=list)
    registry: Registry = field(init=False)
    writes: Writes = field(init=False)
    gate: Gate = field(init=False)
    restart: Tool = field(init=False)
    refund: Tool = field(init=False)

    def __post_init__(self) -> None:
        self.restart, self.refund = self._tools()
        self.registry = Registry()
        self.registry.register(self.restart)
        self.registry.register(self.refund)
        self.writes = self.writes_with(self.keyring)
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock, audit=self.audit)

    def writes_with(self, keyring: Keyring) -> Writes:
        """Another process on the same store, registry and clock, with its own keyring."""
        return Writes(
            self.registry,
            self.store,
            keyring,
            clock=self.clock,
            audit=self.audit,
            new_id=sequential_ids("plan"),
        )

    def _tools(self) -> tuple[Tool, Tool]:
        effects = self.effects
        fail_next = self.fail_next

        def effect(ctx: ToolContext) -> dict[str, str]:
            assert ctx.idempotency_key is not None
            if fail_next:
                failure = fail_next.pop(0)
                if isinstance(failure, TimeoutError):
                    # The effect happened; only the response is lost.
                    effects.setdefault(ctx.idempotency_key, []).append("J-lost")
                raise failure
            job = f"J-{sum(map(len, effects.values())) + 1}"
            effects.setdefault(ctx.idempotency_key, []).append(job)
            return {"job": job}

        def reconcile(key: str, ctx: ToolContext) -> Reconciled:
            done = effects.get(key)
            return Found({"job": done[0]}) if done else NotExecuted()

        @tool(
            risk=RiskLevel.L2_REVERSIBLE_WRITE,
            namespace="ops",
            side_effect=SideEffect.EXTERNAL_WRITE,
            permissions=OPS,
            confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM, ttl_seconds=TTL),
            reconcile=reconcile,
            business_id="job",
        )
        def restart(
            ctx: ToolContext,
            server: Annotated[str, Field(pattern=r"^web-[0-9]$")],
            reason: Annotated[str, Field(max_length=1000)],
        ) -> dict[str, str]:
            """Restart a web server."""
            return effect(ctx)

        @tool(
            risk=RiskLevel.L3_HIGH_RISK_WRITE,
            namespace="pay",
            side_effect=SideEffect.EXTERNAL_WRITE,
            permissions={"pay.refund"},
            confirmation=ConfirmationPolicy(
                mode=ConfirmationMode.APPROVE,
                approver_permission="pay.approve",
                distinct_approvers=2,
                ttl_seconds=TTL,
            ),
            reconcile=reconcile,
            business_id="job",
        )
        def refund(
            ctx: ToolContext,
            order: Annotated[str, Field(pattern=r"^o-[0-9]+$")],
            cents: Annotated[int, Field(ge=1, le=100_000)],
        ) -> dict[str, str]:
            """Refund part of an order."""
            return effect(ctx)

        return restart, refund

    async def propose(
        self, who: Principal = ALICE, *, tool_name: str = "ops.restart", **arguments: Any
    ) -> str:
        """A plan made the only way a model can: a tool call through the gate."""
        if not arguments:
            arguments = (
                {"server": "web-1", "reason": "stuck"}
                if tool_name == "ops.restart"
                else {"order": "o-17", "cents": 1250}
            )
        envelope = await self.gate.handle(
            ToolCall(id=f"call-{len(self.audit.events)}", name=tool_name, arguments=arguments),
            who,
        )
        assert envelope.error_type in {ErrorCode.NEEDS_CONFIRMATION, ErrorCode.NEEDS_APPROVAL}
        assert isinstance(envelope.data, dict)
        return str(envelope.data["plan_id"])

    def plan(self, plan_id: str) -> PlanRecord:
        found = self.store.get_plan(plan_id)
        assert found is not None
        return found


async def _refused(work: Any) -> WriteRefusedError:
    """The refusal of a host request: raised when deciding, returned when executing."""
    try:
        answer = await work
    except WriteRefusedError as refused:
        return refused
    # Executing returns its refusals: an outcome that reached no record, with a code.
    assert isinstance(answer, WriteOutcome), answer
    assert answer.record is None
    assert answer.code is not None
    return WriteRefusedError(answer.code, answer.envelope.summary)


def _frozen(record: PlanRecord) -> tuple[PlanState, int, frozenset[str]]:
    return record.state, record.version, record.approvals


async def _refused_and_unchanged(
    kit: Kit, plan_id: str, token: str, who: Principal, code: ErrorCode
) -> None:
    before = _frozen(kit.plan(plan_id))
    refusal = await _refused(kit.writes.confirm(plan_id, token, who))
    assert refusal.code is code
    assert _frozen(kit.plan(plan_id)) == before


@pytest.fixture
def kit() -> Kit:
    return Kit(store=MemoryStore(), keyring=Keyring(K1))


@pytest.fixture
def any_store_kit(store: Store) -> Kit:
    return Kit(store=store, keyring=Keyring(K1))


# --- altered and malformed tokens ----------------------------------------------------------------

_FIELDS = ("prefix", "key id", "plan id", "plan hash", "expiry", "nonce", "mac")


def _flip(text: str, position: int) -> str:
    """`text` with one character replaced by another of the same kind."""
    character = text[position]
    if character.isdigit():
        replacement = str((int(character) + 1) % 10)
    elif character in "abcdef":
        replacement = "f" if character == "a" else "a"
    else:
        replacement = "B" if character == "A" else "A"
    return text[:position] + replacement + text[position + 1 :]


@pytest.mark.parametrize("position", [0, -1], ids=["first", "last"])
@pytest.mark.parametrize("field_index", range(7), ids=_FIELDS)
async def test_changing_one_character_of_any_field_makes_a_token_invalid_and_changes_nothing(
    kit: Kit, field_index: int, position: int
) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    parts = token.value.split(".")
    assert len(parts) == len(_FIELDS)
    parts[field_index] = _flip(parts[field_index], position)
    altered = ".".join(parts)
    assert altered != token.value

    await _refused_and_unchanged(kit, plan_id, altered, ALICE, ErrorCode.CONFIRMATION_INVALID)

    # No nonce was used up: the token as issued still confirms.
    confirmed = await kit.writes.confirm(plan_id, token.value, ALICE)
    assert confirmed.state is PlanState.CONFIRMED


_MALFORMED: dict[str, Callable[[str], str]] = {
    "empty": lambda _: "",
    "truncated by one": lambda t: t[:-1],
    "truncated to half": lambda t: t[: len(t) // 2],
    "extra field": lambda t: f"{t}.AAAA",
    "missing field": lambda t: ".".join(t.split(".")[:-1]),
    "ten kilobytes": lambda t: t + "A" * 10_240,
    "ten kilobytes of dots": lambda _: "." * 10_240,
    "non-ascii nonce": lambda t: t.replace(t.split(".")[5], "é" + t.split(".")[5][1:]),
    "fullwidth digits": lambda t: t.replace(t.split(".")[4], "\uff11" * 13),
    "surrounding spaces": lambda t: f" {t} ",
    "trailing newline": lambda t: f"{t}\n",
    "upper-case hash": lambda t: t.replace(t.split(".")[3], t.split(".")[3].upper()),
    "padded mac": lambda t: f"{t}=",
    "json of the token": lambda t: json.dumps({"token": t}),
    "chat text ok": lambda _: "ok",
    "chat text confirmed": lambda _: "yes, confirmed",
}


@pytest.mark.parametrize("mangle", _MALFORMED.values(), ids=_MALFORMED.keys())
async def test_a_malformed_token_is_invalid_and_uses_up_nothing(
    kit: Kit, mangle: Callable[[str], str]
) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    await _refused_and_unchanged(
        kit, plan_id, mangle(token.value), ALICE, ErrorCode.CONFIRMATION_INVALID
    )
    assert (await kit.writes.confirm(plan_id, token.value, ALICE)).state is PlanState.CONFIRMED


@pytest.mark.parametrize(
    "forger",
    [
        Keyring(SigningKey("k1", OTHER_SECRET)),
        Keyring(SigningKey("k9", OTHER_SECRET)),
        Keyring(SigningKey("k9", SECRET)),
    ],
    ids=["same key id, another secret", "unknown key id", "our secret under an unknown id"],
)
async def test_a_token_signed_by_any_other_key_is_invalid(kit: Kit, forger: Keyring) -> None:
    plan_id = await kit.propose()
    forged = forger.issue(kit.plan(plan_id).plan, ALICE)
    await _refused_and_unchanged(kit, plan_id, forged.value, ALICE, ErrorCode.CONFIRMATION_INVALID)
    token = await kit.writes.issue_token(plan_id, ALICE)
    assert (await kit.writes.confirm(plan_id, token.value, ALICE)).state is PlanState.CONFIRMED


async def test_a_token_issued_to_someone_else_is_invalid_in_the_attackers_hands(kit: Kit) -> None:
    plan_id = await kit.propose()
    plan = kit.plan(plan_id).plan
    token = await kit.writes.issue_token(plan_id, ALICE)
    namesake = Principal(user_id="alice", tenant_id="t2", permissions=ALICE.permissions)
    # Alice's own token in a colleague's hands, or in a namesake's of another tenant.
    await _refused_and_unchanged(kit, plan_id, token.value, BOB, ErrorCode.CONFIRMATION_INVALID)
    await _refused_and_unchanged(kit, plan_id, token.value, namesake, ErrorCode.NOT_FOUND)
    # Genuine tokens for this very plan, signed by our key, but for other people.
    for holder in (BOB, namesake, MALLORY):
        minted = kit.keyring.issue(plan, holder)
        await _refused_and_unchanged(
            kit, plan_id, minted.value, ALICE, ErrorCode.CONFIRMATION_INVALID
        )
    # A colleague holding a genuine token issued to him still may not confirm.
    await _refused_and_unchanged(
        kit, plan_id, kit.keyring.issue(plan, BOB).value, BOB, ErrorCode.PERMISSION_DENIED
    )
    assert (await kit.writes.confirm(plan_id, token.value, ALICE)).state is PlanState.CONFIRMED


async def test_a_token_for_another_plan_is_plan_changed(kit: Kit) -> None:
    first = await kit.propose(server="web-1", reason="stuck")
    second = await kit.propose(server="web-2", reason="stuck")
    token = await kit.writes.issue_token(first, ALICE)
    await _refused_and_unchanged(kit, second, token.value, ALICE, ErrorCode.PLAN_CHANGED)
    assert (await kit.writes.confirm(first, token.value, ALICE)).state is PlanState.CONFIRMED
    assert kit.plan(second).state is PlanState.PROPOSED


# --- replay -------------------------------------------------------------------------------------


async def test_a_token_confirms_once_and_its_replay_is_refused(any_store_kit: Kit) -> None:
    kit = any_store_kit
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    assert (await kit.writes.confirm(plan_id, token.value, ALICE)).state is PlanState.CONFIRMED
    await _refused_and_unchanged(kit, plan_id, token.value, ALICE, ErrorCode.CONFIRMATION_REPLAYED)
    outcome = await kit.writes.execute_plan(plan_id, ALICE)
    assert outcome.envelope.status is Status.OK
    await _refused_and_unchanged(kit, plan_id, token.value, ALICE, ErrorCode.CONFIRMATION_REPLAYED)
    assert sum(map(len, kit.effects.values())) == 1


def test_sixteen_concurrent_presentations_of_one_token_confirm_exactly_once(
    any_store_kit: Kit, race: Race
) -> None:
    kit = any_store_kit
    plan_id = asyncio.run(kit.propose())
    token = asyncio.run(kit.writes.issue_token(plan_id, ALICE))
    # Each racer is a process of its own: its own Writes and event loop, one store.
    instances = [kit.writes_with(Keyring(K1)) for _ in range(RACERS)]
    codes: list[ErrorCode | None] = [None] * RACERS

    def present(i: int) -> bool:
        try:
            asyncio.run(instances[i].confirm(plan_id, token.value, ALICE))
        except WriteRefusedError as refused:
            codes[i] = refused.code
            return False
        return True

    confirmed = race(RACERS, present)
    assert confirmed.count(True) == 1
    assert sorted(str(c) for c in codes if c is not None) == [
        ErrorCode.CONFIRMATION_REPLAYED.value
    ] * (RACERS - 1)
    assert kit.plan(plan_id).state is PlanState.CONFIRMED
    confirmations = [e for e in kit.audit.events if e.decision == "confirmed"]
    assert len(confirmations) == 1


# --- key rotation --------------------------------------------------------------------------------


async def test_a_token_of_a_rotated_out_key_verifies_while_the_key_is_kept_for_verifying(
    kit: Kit,
) -> None:
    plan_id = await kit.propose()
    old_token = await kit.writes.issue_token(plan_id, ALICE)
    assert old_token.value.split(".")[1] == "k1"

    rotated = kit.writes_with(Keyring(K2, verifying=[K1]))
    new_token = await rotated.issue_token(plan_id, ALICE)
    assert new_token.claims.key_id == "k2"
    assert new_token.value.split(".")[1] == "k2"
    # A process that does not know the new key yet refuses the new token.
    await _refused_and_unchanged(
        kit, plan_id, new_token.value, ALICE, ErrorCode.CONFIRMATION_INVALID
    )

    # Once the old key is dropped, its tokens are worthless.
    dropped = kit.writes_with(Keyring(K2))
    before = _frozen(kit.plan(plan_id))
    refusal = await _refused(dropped.confirm(plan_id, old_token.value, ALICE))
    assert refusal.code is ErrorCode.CONFIRMATION_INVALID
    assert _frozen(kit.plan(plan_id)) == before

    assert (await rotated.confirm(plan_id, old_token.value, ALICE)).state is PlanState.CONFIRMED


# --- expiry --------------------------------------------------------------------------------------


async def test_a_plan_expires_at_exactly_its_expiry_and_its_token_is_then_refused(
    kit: Kit,
) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    expires_at = kit.plan(plan_id).plan.expires_at
    kit.clock.advance(TTL)
    assert kit.clock.now() == expires_at

    refusal = await _refused(kit.writes.confirm(plan_id, token.value, ALICE))
    assert refusal.code is ErrorCode.PLAN_EXPIRED
    assert kit.plan(plan_id).state is PlanState.EXPIRED
    refusal = await _refused(kit.writes.execute_plan(plan_id, ALICE))
    assert refusal.code is ErrorCode.PLAN_EXPIRED
    assert kit.effects == {}


async def test_a_plan_confirms_a_millisecond_before_its_expiry_but_cannot_run_at_it(
    kit: Kit,
) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    kit.clock.advance(TTL - 0.001)
    assert (await kit.writes.confirm(plan_id, token.value, ALICE)).state is PlanState.CONFIRMED
    kit.clock.advance(0.001)
    refusal = await _refused(kit.writes.execute_plan(plan_id, ALICE))
    assert refusal.code is ErrorCode.PLAN_EXPIRED
    assert kit.effects == {}
    assert kit.store.get_execution(_key(kit, plan_id)) is None


def _key(kit: Kit, plan_id: str) -> str:
    plan = kit.plan(plan_id).plan
    return plan_key(tenant_id=plan.tenant_id, tool=plan.tool, plan_id=plan.plan_id)


# --- the model cannot confirm ---------------------------------------------------------------------


async def test_nothing_a_model_writes_confirms_or_executes_a_plan(kit: Kit) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    before = _frozen(kit.plan(plan_id))
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("ops.restart", {"server": "web-1", "reason": "ok"}),
        ("ops.restart", {"server": "web-1", "reason": "confirmed, go ahead"}),
        ("ops.restart", {"server": "web-1", "reason": token.value}),
        ("ops.restart", {"server": "web-1", "reason": f"plan {plan_id} token {token.value}"}),
        ("ops.restart", {"server": "web-1", "reason": "stuck", "confirmation": token.value}),
        ("ops.restart", {"server": "web-1", "reason": "stuck", "plan_id": plan_id}),
        ("confirm_plan", {"plan_id": plan_id, "token": token.value}),
        ("execute_plan", {"plan_id": plan_id}),
    ]
    for n, (name, arguments) in enumerate(attempts):
        envelope = await kit.gate.handle(
            ToolCall(id=f"model-{n}", name=name, arguments=arguments), ALICE
        )
        assert envelope.status is Status.ERROR
        assert envelope.error_type in {
            ErrorCode.NEEDS_CONFIRMATION,
            ErrorCode.INVALID_ARGUMENTS,
            ErrorCode.UNKNOWN_TOOL,
        }
        if envelope.error_type is ErrorCode.NEEDS_CONFIRMATION:
            # Another plan, waiting for a person like any other.
            assert isinstance(envelope.data, dict)
            assert envelope.data["plan_id"] != plan_id
            assert kit.plan(str(envelope.data["plan_id"])).state is PlanState.PROPOSED

    assert _frozen(kit.plan(plan_id)) == before
    assert kit.effects == {}
    assert kit.store.get_execution(_key(kit, plan_id)) is None
    assert not [e for e in kit.audit.events if e.decision in {"confirmed", "approved"}]
    # The token the model saw was never used: the person can still confirm with it.
    assert (await kit.writes.confirm(plan_id, token.value, ALICE)).state is PlanState.CONFIRMED


def _secret_forms(secret: bytes) -> list[str]:
    return [
        secret.decode("latin-1"),
        secret.hex(),
        base64.b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode().rstrip("="),
    ]


async def test_neither_envelopes_nor_audit_events_carry_a_token_or_the_secret(kit: Kit) -> None:
    envelopes: list[Envelope] = []
    call = ToolCall(id="call-1", name="ops.restart", arguments={"server": "web-1", "reason": "x"})
    envelopes.append(await kit.gate.handle(call, ALICE))
    assert isinstance(envelopes[0].data, dict)
    plan_id = str(envelopes[0].data["plan_id"])
    spare = await kit.writes.issue_token(plan_id, ALICE)
    token = await kit.writes.issue_token(plan_id, ALICE)
    await _refused(kit.writes.confirm(plan_id, spare.value[:-1], ALICE))
    await kit.writes.confirm(plan_id, token.value, ALICE)
    await _refused(kit.writes.confirm(plan_id, token.value, ALICE))
    envelopes.append((await kit.writes.execute_plan(plan_id, ALICE)).envelope)
    envelopes.append((await kit.writes.execute_plan(plan_id, ALICE)).envelope)
    assert envelopes[-1].status is Status.OK

    texts = [e.to_json() for e in envelopes]
    texts += [json.dumps(dataclasses.asdict(e), default=str) for e in kit.audit.events]
    texts += [repr(token), repr(K1), repr(kit.plan(plan_id))]
    forbidden = [token.value, spare.value, token.value.rsplit(".", 1)[1]]
    forbidden += [spare.value.rsplit(".", 1)[1], *_secret_forms(SECRET)]
    for text in texts:
        for secret in forbidden:
            assert secret not in text
    assert len(kit.audit.events) > 5


# --- tenancy -------------------------------------------------------------------------------------


async def test_another_tenant_cannot_tell_a_plan_from_a_random_id(kit: Kit) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    before = _frozen(kit.plan(plan_id))

    async def answers(target: str) -> list[tuple[ErrorCode, str]]:
        requests = [
            kit.writes.get_plan(target, MALLORY),
            kit.writes.issue_token(target, MALLORY),
            kit.writes.confirm(target, token.value, MALLORY),
            kit.writes.execute_plan(target, MALLORY),
            kit.writes.reject(target, MALLORY),
            kit.gate.revise_plan(target, '{"server": "web-2", "reason": "x"}', MALLORY),
        ]
        refusals = [await _refused(request) for request in requests]
        return [(r.code, r.message) for r in refusals]

    real = await answers(plan_id)
    assert {code for code, _ in real} == {ErrorCode.NOT_FOUND}
    assert real == await answers("plan-404")
    assert real == await answers("../" + "x" * 100)
    assert _frozen(kit.plan(plan_id)) == before
    assert kit.effects == {}


# --- approvals ------------------------------------------------------------------------------------


async def test_an_approval_plan_needs_two_distinct_approvers_other_than_the_requester(
    kit: Kit,
) -> None:
    plan_id = await kit.propose(tool_name="pay.refund")
    assert kit.plan(plan_id).plan.required_approvals == 2

    # The requester holds the approver permission, yet may not approve her own plan.
    for outsider in (ALICE, ERIN, BOB):
        refusal = await _refused(kit.writes.issue_token(plan_id, outsider))
        assert refusal.code is ErrorCode.PERMISSION_DENIED
    refusal = await _refused(kit.writes.issue_token(plan_id, MALLORY))
    assert refusal.code is ErrorCode.NOT_FOUND
    # Not even with a genuine token minted for her.
    minted = kit.keyring.issue(kit.plan(plan_id).plan, ALICE)
    await _refused_and_unchanged(kit, plan_id, minted.value, ALICE, ErrorCode.PERMISSION_DENIED)

    first = await kit.writes.confirm(
        plan_id, (await kit.writes.issue_token(plan_id, CAROL)).value, CAROL
    )
    assert first.approvals == {"carol"}
    assert first.state is PlanState.AWAITING_CONFIRMATION
    again = await kit.writes.confirm(
        plan_id, (await kit.writes.issue_token(plan_id, CAROL)).value, CAROL
    )
    assert again.approvals == {"carol"}
    assert again.state is PlanState.AWAITING_CONFIRMATION
    refusal = await _refused(kit.writes.execute_plan(plan_id, ALICE))
    assert refusal.code is ErrorCode.NEEDS_APPROVAL

    second = await kit.writes.confirm(
        plan_id, (await kit.writes.issue_token(plan_id, DAVE)).value, DAVE
    )
    assert second.approvals == {"carol", "dave"}
    assert second.state is PlanState.CONFIRMED
    outcome = await kit.writes.execute_plan(plan_id, ALICE)
    assert outcome.envelope.status is Status.OK
    assert kit.plan(plan_id).state is PlanState.EXECUTED
    assert sum(map(len, kit.effects.values())) == 1


async def test_an_approvers_revision_is_a_new_plan_that_no_earlier_token_confirms(
    kit: Kit,
) -> None:
    old_id = await kit.propose(tool_name="pay.refund")
    carols_old = await kit.writes.issue_token(old_id, CAROL)
    assert (await kit.writes.confirm(old_id, carols_old.value, CAROL)).approvals == {"carol"}
    unused_old = await kit.writes.issue_token(old_id, DAVE)

    envelope = await kit.gate.revise_plan(old_id, '{"order": "o-17", "cents": 900}', FRANK)
    assert envelope.error_type is ErrorCode.NEEDS_APPROVAL
    assert isinstance(envelope.data, dict)
    new_id = str(envelope.data["plan_id"])
    assert new_id != old_id
    new = kit.plan(new_id)
    assert new.plan.revises == old_id
    assert new.plan.argument_values == {"order": "o-17", "cents": 900}
    assert new.plan.plan_hash != kit.plan(old_id).plan.plan_hash
    assert new.approvals == frozenset()
    assert kit.plan(old_id).state is PlanState.REJECTED

    # Tokens of the old plan do not carry over, and the old plan stays closed.
    await _refused_and_unchanged(kit, new_id, unused_old.value, DAVE, ErrorCode.PLAN_CHANGED)
    await _refused_and_unchanged(kit, new_id, carols_old.value, CAROL, ErrorCode.PLAN_CHANGED)
    refusal = await _refused(kit.writes.confirm(old_id, unused_old.value, DAVE))
    assert refusal.code is ErrorCode.PLAN_CLOSED
    refusal = await _refused(kit.writes.execute_plan(old_id, ALICE))
    assert refusal.code is ErrorCode.PLAN_CLOSED

    # The revision needs its own two approvals; its author is not one of them.
    refusal = await _refused(kit.writes.issue_token(new_id, FRANK))
    assert refusal.code is ErrorCode.PERMISSION_DENIED
    for approver in (CAROL, DAVE):
        token = await kit.writes.issue_token(new_id, approver)
        await kit.writes.confirm(new_id, token.value, approver)
    assert kit.plan(new_id).state is PlanState.CONFIRMED
    assert kit.effects == {}


# --- closing a plan -------------------------------------------------------------------------


@pytest.mark.parametrize("closing", ["reject", "expire"])
async def test_a_plan_closed_after_a_transient_failure_never_runs(kit: Kit, closing: str) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    await kit.writes.confirm(plan_id, token.value, ALICE)
    kit.fail_next.append(ToolRetryable("busy"))
    first = await kit.writes.execute_plan(plan_id, ALICE)
    assert first.envelope.error_type is ErrorCode.TRANSIENT
    assert first.record is not None
    assert first.record.status is ExecutionStatus.PREPARED

    record = kit.store.get_execution(_key(kit, plan_id))
    assert record is not None
    if closing == "reject":
        assert (await kit.writes.reject(plan_id, ALICE)).state is PlanState.REJECTED
        # The released record is settled as withdrawn; asking again answers with it.
        again = await kit.writes.execute_plan(plan_id, ALICE)
        assert again.envelope.error_type is ErrorCode.PLAN_CLOSED
        closed = kit.store.get_execution(_key(kit, plan_id))
        assert closed is not None
        assert (closed.status, closed.attempts) == (ExecutionStatus.FAILED_FINAL, 1)
    else:
        kit.clock.advance(TTL)
        refusal = await _refused(kit.writes.execute_plan(plan_id, ALICE))
        assert refusal.code is ErrorCode.PLAN_EXPIRED
        assert kit.store.get_execution(_key(kit, plan_id)) == record
    assert kit.effects == {}


# --- known defects, pinned until fixed --------------------------------------------------------


@pytest.mark.parametrize("variant", ["leading zero", "trailing newline"])
async def test_a_token_whose_expiry_is_written_differently_is_invalid(
    kit: Kit, variant: str
) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    parts = token.value.split(".")
    parts[4] = "0" + parts[4] if variant == "leading zero" else parts[4] + "\n"
    await _refused_and_unchanged(
        kit, plan_id, ".".join(parts), ALICE, ErrorCode.CONFIRMATION_INVALID
    )


async def test_a_token_with_an_absurd_expiry_is_invalid_rather_than_a_crash(kit: Kit) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    parts = token.value.split(".")
    parts[4] = "9" * 15
    await _refused_and_unchanged(
        kit, plan_id, ".".join(parts), ALICE, ErrorCode.CONFIRMATION_INVALID
    )


@pytest.mark.parametrize("closing", ["reject", "expire"])
async def test_a_plan_whose_effect_happened_ends_executed(kit: Kit, closing: str) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    await kit.writes.confirm(plan_id, token.value, ALICE)
    kit.fail_next.append(TimeoutError("response lost"))
    lost = await kit.writes.execute_plan(plan_id, ALICE)
    assert lost.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN

    await _close(kit, plan_id, closing)
    kit.clock.advance(60)
    report = await Reconciler(kit.registry, kit.store, clock=kit.clock).run_once()
    assert report.succeeded == (_key(kit, plan_id),)
    assert kit.plan(plan_id).state is PlanState.EXECUTED


async def _close(kit: Kit, plan_id: str, closing: str) -> bool:
    """Try to reject or expire a plan; whether it closed (refusing is a sound answer)."""
    if closing == "expire":
        kit.clock.advance(TTL)
        await _refused(kit.writes.issue_token(plan_id, ALICE))
        return kit.plan(plan_id).state is PlanState.EXPIRED
    try:
        await kit.writes.reject(plan_id, ALICE)
    except WriteRefusedError as refused:
        code = refused.code
    else:
        return True
    assert code is ErrorCode.PLAN_CLOSED
    return False


async def test_a_plan_rejected_while_its_write_is_unknown_is_never_run_by_the_reconciler(
    kit: Kit,
) -> None:
    plan_id = await kit.propose()
    token = await kit.writes.issue_token(plan_id, ALICE)
    await kit.writes.confirm(plan_id, token.value, ALICE)
    kit.fail_next.append(ConnectionResetError("the request never arrived"))
    lost = await kit.writes.execute_plan(plan_id, ALICE)
    assert lost.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert kit.effects == {}

    closed = await _close(kit, plan_id, "reject")
    kit.clock.advance(120)
    await Reconciler(kit.registry, kit.store, clock=kit.clock).run_once()
    if closed:
        # The person withdrew consent before anything happened.
        assert kit.effects == {}
    else:
        assert kit.plan(plan_id).state is PlanState.EXECUTED
