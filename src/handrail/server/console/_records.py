"""The console's record pages: executions and the UNKNOWN queue, audit search, runs.

An execution's page shows the record (status, attempts, what the reconciler knows:
checks, next check, escalation, the last error) and the audit timeline of its stages,
with Reconcile and Resolve (a person who checked downstream, with a reason) for an
UNKNOWN one. The audit page searches the tenant's trail page by page; a run's page
shows its transcript with each tool call's envelope. Everything goes through
`services.operations`, which keeps each page inside the person's tenant.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.adapters.transcript import AssistantTurn, Turn, UserTurn
from handrail.errors import AccessRefusedError, ConfigurationError, ErrorCode
from handrail.execution import ExecutionStatus
from handrail.runs import RunState
from handrail.server.auth import services_of
from handrail.server.console._access import posted, viewer
from handrail.server.console._render import page, refusal, to_login
from handrail.server.operations import AuditSearch

if TYPE_CHECKING:
    from starlette.datastructures import FormData

    from handrail.server.console.people import ConsoleSession

__all__ = ["router"]

router = APIRouter()

_MAX_NOTE = 1000
_MAX_FIELD = 256
_PAGE = 50


def _enum_value(text: str | None, names: object) -> str | None:
    return text if isinstance(text, str) and text in names.__members__ else None  # type: ignore[attr-defined]


def _time(text: str | None) -> datetime | None:
    """A time from a form field (ISO 8601; naive means UTC), or None."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _page_size(text: str | None) -> int:
    if text is None or not (text.isascii() and text.isdigit()) or not 0 < int(text) <= _PAGE:
        return _PAGE
    return int(text)


@router.get("/executions")
async def executions(request: Request, status: str | None = None) -> Response:
    """The tenant's execution records (operators), newest first."""
    return await _executions_page(request, _enum_value(status, ExecutionStatus), limit=100)


@router.get("/executions/unknown")
async def unknown(request: Request) -> Response:
    """The UNKNOWN queue: writes whose outcome nobody knows yet, with what is known."""
    return await _executions_page(request, ExecutionStatus.UNKNOWN.value, limit=200, queue=True)


async def _executions_page(
    request: Request, wanted: str | None, *, limit: int, queue: bool = False
) -> Response:
    """The execution records of status `wanted` (None: all) as the person may see them."""
    session = await viewer(request)
    if session is None:
        return to_login(request)
    try:
        found = await services_of(request).operations.list_executions(
            session.principal,
            status=None if wanted is None else ExecutionStatus(wanted),
            limit=limit,
        )
    except AccessRefusedError as refused:
        return refusal(request, refused.code, refused.message, session=session)
    return page(
        "executions.html",
        session=session,
        records=found,
        wanted=wanted or "",
        statuses=[s.value for s in ExecutionStatus],
        queue=queue,
    )


@router.get("/executions/{key}")
async def execution(request: Request, key: str, done: str | None = None) -> Response:
    """One execution record and the audit timeline of its stages."""
    session = await viewer(request)
    if session is None:
        return to_login(request)
    operations = services_of(request).operations
    try:
        record = await operations.get_execution(session.principal, key)
    except AccessRefusedError as refused:
        return refusal(request, refused.code, refused.message, session=session)
    timeline = []
    if record.plan_id is not None:
        try:
            timeline = await operations.call_timeline(session.principal, record.plan_id)
        except AccessRefusedError:
            timeline = []
    return page(
        "execution.html",
        session=session,
        record=record,
        timeline=timeline,
        done=done if done in {"reconciled", "resolved"} else None,
        unknown=record.status is ExecutionStatus.UNKNOWN,
    )


@router.post("/executions/{key}/reconcile")
async def reconcile(request: Request, key: str) -> Response:
    """Ask the tool's reconcile hook about an UNKNOWN record now."""

    async def act(session: ConsoleSession, _form: FormData) -> str:
        await services_of(request).operations.reconcile(session.principal, key)
        return f"/executions/{key}?done=reconciled"

    return await posted(request, act)


@router.post("/executions/{key}/resolve")
async def resolve(request: Request, key: str) -> Response:
    """Settle an UNKNOWN record by a person who checked downstream, with a reason."""

    async def act(session: ConsoleSession, form: FormData) -> str | Response:
        outcome = form.get("outcome")
        note = str(form.get("note") or "").strip()[:_MAX_NOTE]
        business_id = str(form.get("business_id") or "").strip()[:_MAX_FIELD] or None
        if outcome not in {"succeeded", "failed"} or not note:
            message = "say whether it succeeded, and why you know (the note)"
            return refusal(request, ErrorCode.INVALID_ARGUMENTS, message, session=session)
        await services_of(request).operations.resolve(
            session.principal,
            key,
            succeeded=outcome == "succeeded",
            note=note,
            business_id=business_id,
        )
        return f"/executions/{key}?done=resolved"

    return await posted(request, act)


@router.get("/audit")
async def audit(request: Request) -> Response:
    """Search the tenant's audit trail: newest first, a page at a time."""
    session = await viewer(request)
    if session is None:
        return to_login(request)
    query = request.query_params
    fields = {
        name: (query.get(name) or "").strip()[:_MAX_FIELD] or None
        for name in ("tool", "decision", "code", "user", "call_id", "since", "until", "cursor")
    }
    search = AuditSearch(
        tool=fields["tool"],
        decision=fields["decision"],
        code=fields["code"],
        user_id=fields["user"],
        call_id=fields["call_id"],
        since=_time(fields["since"]),
        until=_time(fields["until"]),
        cursor=fields["cursor"],
        limit=_page_size(query.get("limit")),
    )
    try:
        found = await services_of(request).operations.search_audit(session.principal, search)
    except AccessRefusedError as refused:
        return refusal(request, refused.code, refused.message, session=session)
    kept = {k: v for k, v in fields.items() if v is not None and k != "cursor"}
    kept["limit"] = str(search.limit)
    return page(
        "audit.html",
        session=session,
        events=found.events,
        next_cursor=found.next_cursor,
        fields={name: fields[name] or "" for name in fields},
        kept=kept,
    )


@router.get("/runs")
async def runs(request: Request, state: str | None = None) -> Response:
    """The person's runs (the tenant's for auditors), most recently updated first."""
    session = await viewer(request)
    if session is None:
        return to_login(request)
    wanted = _enum_value(state, RunState)
    found = await services_of(request).operations.list_runs(
        session.principal, state=None if wanted is None else RunState(wanted), limit=100
    )
    return page(
        "runs.html",
        session=session,
        runs=found,
        state=wanted or "",
        states=[s.value for s in RunState],
    )


@router.get("/runs/{run_id}")
async def run(request: Request, run_id: str) -> Response:
    """One run: its state and its transcript, each tool call with its envelope."""
    from handrail.loop.agent import read_run  # noqa: PLC0415 - the loop loads when asked for

    session = await viewer(request)
    if session is None:
        return to_login(request)
    try:
        record = await services_of(request).operations.get_run(session.principal, run_id)
    except AccessRefusedError as refused:
        return refusal(request, refused.code, refused.message, session=session)
    try:
        data = read_run(record)
    except ConfigurationError:
        data = None
    turns = None if data is None else [_turn(turn) for turn in data.transcript]
    return page("run.html", session=session, record=record, data=data, turns=turns)


def _text(arguments: str | bytes | Mapping[str, object] | None) -> str:
    if isinstance(arguments, bytes):
        return arguments.decode("utf-8", "replace")
    if arguments is None or isinstance(arguments, str):
        return arguments or ""
    return json.dumps(dict(arguments), ensure_ascii=False, default=str)


def _turn(turn: Turn) -> dict[str, object]:
    """A transcript turn as the run page shows it (every text escaped by the template)."""
    if isinstance(turn, UserTurn):
        return {"kind": "user", "text": turn.text}
    if isinstance(turn, AssistantTurn):
        calls = [
            {
                "id": call.id,
                "name": call.name,
                "arguments": _text(call.arguments),
            }
            for call in turn.calls
        ]
        return {"kind": "assistant", "text": turn.text or "", "calls": calls}
    results = [
        {"tool": r.tool, "call_id": r.call_id, "content": r.content, "is_error": r.is_error}
        for r in turn.results
    ]
    return {"kind": "results", "results": results}
