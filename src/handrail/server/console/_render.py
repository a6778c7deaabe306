"""How the console answers: server-rendered pages, refusals, redirects, and form checks.

Pages are Jinja2 templates shipped in the package (`templates/`), autoescaped, with
every answer marked no-store and framed by nobody (a strict Content-Security-Policy:
the console runs no script). A refusal is a page for a browser and the service's
JSON problem body for anything else. A POSTed form must carry its CSRF token. Never
decides who a request is (`people`) or what the service does (`operations`).
"""

from __future__ import annotations

import functools
import hmac
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import jinja2
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from handrail.server.problems import ServiceCode, problem, status_of

if TYPE_CHECKING:
    from starlette.requests import Request

    from handrail.plans import Amount
    from handrail.server.console.people import ConsoleSession

__all__ = [
    "HEADERS",
    "checked_form",
    "local_path",
    "page",
    "redirect",
    "refusal",
    "to_login",
]

HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
_MAX_FIELDS = 50


def _money(amount: Amount) -> str:
    """Minor units as the currency shows them: `1234` EUR → `12.34 EUR`."""
    major = Decimal(amount.minor_units).scaleb(-amount.exponent)
    return f"{major:,.{amount.exponent}f} {amount.currency}"


def _when(at: datetime | None) -> str:
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty(text: str | None) -> str:
    """JSON text indented for reading; other text as it is."""
    if text is None:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("handrail.server.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["money"] = _money
    environment.filters["when"] = _when
    environment.filters["pretty"] = _pretty
    return environment


def page(
    name: str,
    *,
    session: ConsoleSession | None,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    **context: Any,  # noqa: ANN401 - template values
) -> HTMLResponse:
    """The page `name` rendered with `context`, the session's person and CSRF token."""
    html = (
        _environment()
        .get_template(name)
        .render(
            session=session,
            csrf=None if session is None else session.csrf,
            **context,
        )
    )
    return HTMLResponse(html, status_code=status, headers={**HEADERS, **(headers or {})})


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def refusal(
    request: Request,
    code: str,
    message: str,
    *,
    session: ConsoleSession | None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A refused request: a page for a browser, the JSON problem body otherwise."""
    if _wants_html(request):
        return page(
            "refused.html",
            session=session,
            status=status_of(code),
            headers=headers,
            code=code,
            message=message,
        )
    return problem(code, message, headers={**HEADERS, **(headers or {})})


def redirect(path: str) -> RedirectResponse:
    """303 See Other to a local path (after a POST, the browser GETs it)."""
    return RedirectResponse(path, status_code=303, headers=dict(HEADERS))


def local_path(candidate: str | None, *, default: str = "/plans") -> str:
    """`candidate` if it is a path on this site, else `default`: no open redirect.

    Only `/something` passes: not `//host`, not a backslash (browsers read it as `/`),
    not a scheme, not control characters.
    """
    if not candidate or len(candidate) > 2048 or not candidate.startswith("/"):  # noqa: PLR2004
        return default
    if candidate.startswith("//") or "\\" in candidate:
        return default
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in candidate):  # noqa: PLR2004
        return default
    parts = urlsplit(candidate)
    if parts.scheme or parts.netloc:
        return default
    return candidate


def to_login(request: Request) -> Response:
    """Send a request that proves nobody to the login page (then back here).

    A browser's GET is redirected; anything else is a 401 problem.
    """
    if request.method == "GET" and _wants_html(request):
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return redirect(f"/login?next={quote(local_path(here), safe='')}")
    return refusal(request, ServiceCode.UNAUTHENTICATED, "log in to the console", session=None)


async def checked_form(request: Request, expected_csrf: str) -> FormData | Response:
    """The POSTed form, once its CSRF token matches; else the refusal to answer with.

    Only form bodies are read (a JSON body is 415); the token is compared in
    constant time. Raised before any field is acted on.
    """
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind not in _FORMS:
        return problem(ServiceCode.UNSUPPORTED_MEDIA_TYPE, "the console takes form posts only")
    form = await request.form(max_files=0, max_fields=_MAX_FIELDS)
    presented = form.get("csrf")
    if not isinstance(presented, str) or not hmac.compare_digest(
        presented.encode(), expected_csrf.encode()
    ):
        await form.close()
        return refusal(
            request,
            ServiceCode.CSRF_FAILED,
            "the form's CSRF token is missing or wrong; reload the page and try again",
            session=None,
        )
    return form
