"""What several built-in scenarios share: the refund call and its expectation."""

from __future__ import annotations

from handrail.eval._scenario import Expected, call, reply
from handrail.loop.models import ModelReply

__all__ = ["REFUND", "expect_refund", "propose_refund"]

REFUND = "shop.refund_order"


def propose_refund(call_id: str, order_id: str, cents: int, reason: str) -> ModelReply:
    """A scripted reply proposing one refund."""
    return reply(call(call_id, REFUND, order_id=order_id, amount_cents=cents, reason=reason))


def expect_refund(order_id: str, cents: int) -> Expected:
    """The refund the task asks for: that order, that amount."""
    return Expected(tool=REFUND, arguments={"order_id": order_id, "amount_cents": cents})
