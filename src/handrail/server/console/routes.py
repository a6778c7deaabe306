"""The console's routes: login and logout, the stylesheet, and the pages' routers.

Every page needs a live session (else a browser goes to /login and comes back after);
every POST carries its form's CSRF token, the login form's too (bound to a cookie of
its own, so a cross-site page can neither log a person in nor act for one). `next`
after login is only ever a local path. Pages are in `_plans` and `_records`.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.errors import ErrorCode
from handrail.people import csrf_token
from handrail.server.console import _plans, _records
from handrail.server.console._access import client_of, console_people, viewer
from handrail.server.console._render import (
    checked_form,
    local_path,
    page,
    redirect,
    refusal,
    to_login,
)
from handrail.server.problems import ServiceCode, status_of

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
router.include_router(_plans.router)
router.include_router(_records.router)

_LOGIN_MESSAGES = {
    ServiceCode.UNAUTHENTICATED: "That login and password do not match an active account.",
    ServiceCode.LOCKED_OUT: "Too many failed logins: this account is locked for a while.",
    ErrorCode.RATE_LIMITED: "Too many login attempts from here; wait and try again.",
}


@router.get("/")
async def home(request: Request) -> Response:
    """The console's start: the pending plans (or the login page)."""
    if await viewer(request) is None:
        return to_login(request)
    return redirect("/plans")


@router.get("/static/console.css")
async def stylesheet() -> Response:
    """The console's one stylesheet, shipped in the package."""
    css = (resources.files("handrail.server.console") / "static" / "console.css").read_text()
    return Response(
        css,
        media_type="text/css",
        headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
    )


def _login_page(
    request: Request,
    *,
    next_path: str,
    login: str = "",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    people = console_people(request)
    if people is None:
        return refusal(request, ServiceCode.UNAUTHENTICATED, "console login is off", session=None)
    token, new = people.login_form_token(request)
    answer = page(
        "login.html",
        session=None,
        status=200 if code is None else status_of(code),
        headers=headers,
        login_csrf=csrf_token(token),
        next=next_path,
        login=login,
        code=code or "",
        error=None if code is None else _LOGIN_MESSAGES.get(code, "Login refused."),
    )
    if new:
        people.set_login_cookie(answer, token)
    return answer


@router.get("/login")
async def login_form(request: Request, next: str | None = None) -> Response:  # noqa: A002 - the query's name
    """The login form; a person already logged in goes straight on."""
    target = local_path(next)
    if await viewer(request) is not None:
        return redirect(target)
    return _login_page(request, next_path=target)


@router.post("/login")
async def login(request: Request) -> Response:
    """Check a login: a new session (new cookie, old one revoked), then on to `next`."""
    people = console_people(request)
    if people is None:
        return refusal(request, ServiceCode.UNAUTHENTICATED, "console login is off", session=None)
    form_cookie = request.cookies.get(people.login_cookie) or ""
    form = await checked_form(request, csrf_token(form_cookie) if form_cookie else "\x00")
    if isinstance(form, Response):
        return form
    login_name = str(form.get("login") or "")[:256]
    password = str(form.get("password") or "")
    target = local_path(str(form.get("next") or ""))
    result = await people.login(
        login_name,
        password,
        client=client_of(request),
        replacing=request.cookies.get(people.session_cookie),
    )
    if result.token is None:
        code = result.code or ServiceCode.UNAUTHENTICATED
        retry = {} if result.retry_after is None else {"Retry-After": str(result.retry_after)}
        return _login_page(request, next_path=target, login=login_name, code=code, headers=retry)
    answer = redirect(target)
    people.set_session_cookie(answer, result.token)
    answer.delete_cookie(people.login_cookie, path="/")
    return answer


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session (revoked in the store) and forget the cookie."""
    people = console_people(request)
    session = await viewer(request)
    if people is None or session is None:
        return to_login(request)
    form = await checked_form(request, session.csrf)
    if isinstance(form, Response):
        return form
    await people.logout(session, client=client_of(request))
    answer = redirect("/login")
    people.clear_session_cookie(answer)
    answer.headers["Clear-Site-Data"] = '"cookies"'
    return answer
