"""A store's failed write never carries the values it was writing into an exception's text.

The exception of a refused write reaches logs (the audit writer logs each failed
attempt with its traceback); arguments and their summaries must not go with it.
"""

from __future__ import annotations

import traceback

import pytest

from handrail.errors import StoreError
from handrail.events import CallRecord
from handrail.store import SqlStore

_ACCOUNT = "acct-4111-1111-1111-1111"


def _record() -> CallRecord:
    subject = (
        "r",
        "call_1",
        "payments.refund",
        "1",
        "ab" * 32,
        f'{{"account": "{_ACCOUNT}"}}',
        "u",
        "t",
    )
    return CallRecord(
        "call",
        subject,
        [("lookup", "pass", None, None, 0.001, 1_767_225_600_000_000_000)],
        ids=["ev-1"],
    )


def test_a_refused_audit_write_names_no_value_it_held(sql_store: SqlStore) -> None:
    sql_store.append_audit_items([_record()])
    with pytest.raises(StoreError) as raised:
        sql_store.append_audit_items([_record()])
    text = "".join(traceback.format_exception(raised.value))
    assert "IntegrityError" in text or "UniqueViolation" in text
    assert _ACCOUNT not in text
