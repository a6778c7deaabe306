"""Payments with two tenants: argument-dependent risk and resource ownership.

Orders, refunds and customer exports of the tenants "acme" and "globex" live in one
SQLite file; every query is scoped to the calling Principal's tenant and region, and
the policy decides by amount, row count, recipient count and who owns the order.
"""

from examples.payments.app import TENANTS, PaymentsApp, build_app
from examples.payments.data import Ledger, PaymentsDb, customer_ids
from examples.payments.policy import build_policy
from examples.payments.tools import CustomerFilter, build_tools

__all__ = [
    "TENANTS",
    "CustomerFilter",
    "Ledger",
    "PaymentsApp",
    "PaymentsDb",
    "build_app",
    "build_policy",
    "build_tools",
    "customer_ids",
]
