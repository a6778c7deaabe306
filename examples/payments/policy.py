"""The payments policy: who may do what, depending on the arguments and the real resource.

Resolvers load orders and customers through the caller's tenant-scoped `Ledger`, so an
order of another tenant (or outside the caller's region) is NOT_FOUND, exactly like
one that does not exist. Rules read ownership from the loaded order, never from the
arguments. Amounts are integer cents.

| tool | rule (strictest first) | outcome |
| --- | --- | --- |
| refund_order | caller does not own the order and lacks `refund.any` | DENY |
| refund_order | the order is restricted and the caller lacks `orders.restricted` | DENY |
| refund_order | amount > 10,000.00 | APPROVE, 2 distinct `refund.approve` holders |
| refund_order | amount > 100.00 | APPROVE, 1 `refund.approve` holder |
| refund_order | amount ≤ 100.00 | CONFIRM by the requester |
| export_customers | more than 1,000 rows would be exported | APPROVE, 1 `customers.approve` |
| export_customers | otherwise | ALLOW |
| notify_customers | more than 100 distinct recipients | DENY |
| notify_customers | otherwise | CONFIRM |
| get_order | the order is restricted and the caller lacks `orders.restricted` | DENY |
| get_order | otherwise | ALLOW |

`order_timeline` has no rule of its own on purpose: it reads a restricted order's
events, which the rules forgot. The conversation guard closes that gap: once
`get_order` was denied an order, `order_timeline` cannot reach the same order in that
conversation.
"""

from __future__ import annotations

from typing import Any

from examples.payments.data import PaymentsDb
from examples.payments.tools import CustomerFilter
from handrail import ConfirmationMode, ConfirmationPolicy, Principal
from handrail.authz.policy import (
    Facts,
    Outcome,
    PolicyEngine,
    Resolved,
    Rule,
    all_of,
    is_owner,
    lacks,
    negate,
)

__all__ = [
    "APPROVE_ABOVE_CENTS",
    "CONFIRM_UP_TO_CENTS",
    "MAX_EXPORT_ROWS",
    "MAX_RECIPIENTS",
    "build_policy",
    "rules",
]

CONFIRM_UP_TO_CENTS = 10_000
"""100.00: refunds up to this need only the requester's confirmation."""
APPROVE_ABOVE_CENTS = 1_000_000
"""10,000.00: refunds above this need two distinct approvers."""
MAX_EXPORT_ROWS = 1_000
"""Exports of more rows need an approver."""
MAX_RECIPIENTS = 100
"""Messages to more customers are refused outright."""

_REFUND = "payments.refund_order"


def _amount(facts: Facts) -> int:
    return int(facts.arguments.amount_cents)


def _restricted(facts: Facts) -> bool:
    return bool(facts.resource is not None and facts.resource["restricted"])


def _approvers(permission: str, count: int) -> ConfirmationPolicy:
    return ConfirmationPolicy(
        mode=ConfirmationMode.APPROVE,
        approver_permission=permission,
        distinct_approvers=count,
    )


def rules() -> tuple[Rule, ...]:
    """The payments rules, in the order they are declared (precedence sorts them)."""
    restricted = all_of(_restricted, lacks("orders.restricted"))
    return (
        Rule(
            name="refund-up-to-100",
            tool=_REFUND,
            outcome=Outcome.CONFIRM,
            reason="a refund of at most 100.00 needs the requester's confirmation",
            when=lambda facts: _amount(facts) <= CONFIRM_UP_TO_CENTS,
        ),
        Rule(
            name="refund-over-100",
            tool=_REFUND,
            outcome=Outcome.APPROVE,
            reason="a refund of more than 100.00 needs an approver",
            when=lambda facts: _amount(facts) > CONFIRM_UP_TO_CENTS,
            approval=_approvers("refund.approve", 1),
        ),
        Rule(
            name="refund-over-10000",
            tool=_REFUND,
            outcome=Outcome.APPROVE,
            reason="a refund of more than 10,000.00 needs two distinct approvers",
            when=lambda facts: _amount(facts) > APPROVE_ABOVE_CENTS,
            approval=_approvers("refund.approve", 2),
        ),
        Rule(
            name="refund-not-owner",
            tool=_REFUND,
            outcome=Outcome.DENY,
            reason="only the order's owner, or a holder of refund.any, may refund it",
            when=all_of(negate(is_owner("owner_id")), lacks("refund.any")),
        ),
        Rule(
            name="refund-restricted-order",
            tool=_REFUND,
            outcome=Outcome.DENY,
            reason="the order is restricted; refunding it needs orders.restricted",
            when=restricted,
        ),
        Rule(
            name="export-within-limit",
            tool="payments.export_customers",
            outcome=Outcome.ALLOW,
            reason=f"an export of at most {MAX_EXPORT_ROWS} rows",
        ),
        Rule(
            name="export-over-1000-rows",
            tool="payments.export_customers",
            outcome=Outcome.APPROVE,
            reason=f"an export of more than {MAX_EXPORT_ROWS} rows needs an approver",
            when=lambda facts: facts.resource["rows"] > MAX_EXPORT_ROWS,
            approval=_approvers("customers.approve", 1),
        ),
        Rule(
            name="notify-confirm",
            tool="payments.notify_customers",
            outcome=Outcome.CONFIRM,
            reason="a message to customers needs the requester's confirmation",
        ),
        Rule(
            name="notify-over-100-recipients",
            tool="payments.notify_customers",
            outcome=Outcome.DENY,
            reason=f"a message to more than {MAX_RECIPIENTS} customers is a campaign, not a call",
            when=lambda facts: facts.resource["recipients"] > MAX_RECIPIENTS,
        ),
        Rule(
            name="order-read",
            tool="payments.get_order",
            outcome=Outcome.ALLOW,
            reason="an order of the caller's scope",
        ),
        Rule(
            name="order-read-restricted",
            tool="payments.get_order",
            outcome=Outcome.DENY,
            reason="the order is restricted; reading it needs orders.restricted",
            when=restricted,
        ),
    )


def build_policy(db: PaymentsDb) -> PolicyEngine:
    """The payments policy over one database: its rules and its tenant-scoped resolvers."""

    def order(principal: Principal, arguments: Any) -> Resolved | None:  # noqa: ANN401 - model
        found = db.for_principal(principal).order(arguments.order_id)
        return None if found is None else Resolved(key=f"order:{found['order_id']}", value=found)

    def export_size(principal: Principal, arguments: Any) -> Resolved:  # noqa: ANN401 - model
        chosen = arguments.filters or CustomerFilter()
        matching = db.for_principal(principal).count_customers(
            segment=chosen.segment,
            region=chosen.region,
        )
        return Resolved(key=None, value={"rows": min(arguments.limit, matching)})

    def recipients(principal: Principal, arguments: Any) -> Resolved | None:  # noqa: ANN401
        wanted = set(arguments.recipients)
        if db.for_principal(principal).existing_customers(wanted) != wanted:
            return None  # one unknown recipient (of this scope) hides which one
        return Resolved(key=None, value={"recipients": len(wanted)})

    return PolicyEngine(
        rules(),
        resolvers={
            "payments.get_order": order,
            "payments.order_timeline": order,
            _REFUND: order,
            "payments.export_customers": export_size,
            "payments.notify_customers": recipients,
        },
    )
