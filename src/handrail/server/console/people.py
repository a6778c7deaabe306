"""The console's people authority: logging in, sessions, and who a request's cookie is.

`ConsolePeople` checks a login (per-client rate limit, per-account lock-out, argon2
password), opens a server-side session under a fresh token (never one the browser
brought: no fixation), and answers `principal_for(request)` from the session cookie
while the session is unrevoked, inside its absolute and idle limits, and its person
enabled; the Principal is built from the stored person on every request. Logins and
logouts are audited. It never renders a page and never reads a form.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

import anyio.to_thread
from limits import parse as parse_rate
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.errors import StorageError

from handrail.errors import ErrorCode
from handrail.events import AuditSubject
from handrail.people import (
    Passwords,
    PersonRecord,
    SessionRecord,
    csrf_token,
    draw_token,
    session_hash,
    valid_login,
    valid_token,
)
from handrail.record.audit import Auditor
from handrail.server.console.directory import StoreAudit
from handrail.server.problems import ServiceCode
from handrail.store.base import reads_block

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from handrail.clock import Clock
    from handrail.principal import Principal
    from handrail.server.config import ConsoleConfig
    from handrail.store.base import Store

__all__ = ["ConsolePeople", "ConsoleSession", "LoginResult"]

T = TypeVar("T")

_TOUCH_EVERY = timedelta(seconds=60)  # last use is written at most once a minute
_LOGIN_FORM_MINUTES = 60
_STATE = "handrail_console_session"


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsoleSession:
    """A request's live session: its token (the cookie), record, person and CSRF token."""

    token: str
    record: SessionRecord
    person: PersonRecord
    principal: Principal
    csrf: str


@dataclass(frozen=True, kw_only=True, slots=True)
class LoginResult:
    """A login's answer: the new session's token, or a refusal code (and when to retry)."""

    token: str | None = None
    code: str | None = None
    retry_after: int | None = None


_log = logging.getLogger(__name__)


class ConsolePeople:
    """The `PeopleAuthority` of the console: people in the store, sessions in the store.

    `secure_cookies` marks the cookies Secure (and names them `__Host-...`, which
    browsers bind to this exact origin); `random_bytes` draws tokens; `passwords`
    hashes and checks passwords (tests pass a cheap argon2 hasher). The login rate
    limit counts in `rate_storage` (a `limits` storage: the service passes its Redis
    one, so every worker counts together), else in this process; a storage that fails
    refuses logins (UNAVAILABLE) rather than let them through uncounted.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        config: ConsoleConfig,
        secure_cookies: bool,
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
        passwords: Passwords | None = None,
        rate_storage: Storage | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._config = config
        self._secure = secure_cookies
        self._random = random_bytes
        self._passwords = passwords or Passwords()
        self._auditor = Auditor(StoreAudit(store), clock)
        self._reads_block = reads_block(store)
        self._rate = parse_rate(config.login_rate)
        self._window = MovingWindowRateLimiter(rate_storage or MemoryStorage())
        prefix = "__Host-" if secure_cookies else ""
        self.session_cookie = f"{prefix}handrail_session"
        self.login_cookie = f"{prefix}handrail_login"

    @property
    def passwords(self) -> Passwords:
        """The password hasher (the people directory uses the same)."""
        return self._passwords

    # --- who a request is ---------------------------------------------------------------------

    async def principal_for(self, request: Request) -> Principal | None:
        """The person of the request's session cookie, or None when it proves nothing."""
        found = await self.session_for(request)
        return None if found is None else found.principal

    async def session_for(self, request: Request) -> ConsoleSession | None:
        """The request's live session (looked up once per request), or None."""
        if hasattr(request.state, _STATE):
            cached: ConsoleSession | None = getattr(request.state, _STATE)
            return cached
        found = await self._session(request.cookies.get(self.session_cookie))
        setattr(request.state, _STATE, found)
        return found

    async def _session(self, token: str | None) -> ConsoleSession | None:
        if token is None or not valid_token(token):
            return None
        key = session_hash(token)
        record = await self._reading(lambda: self._store.get_session(key))
        now = self._clock.now()
        idle = timedelta(minutes=self._config.idle_minutes)
        if (
            record is None
            or record.revoked_at is not None
            or now >= record.expires_at
            or now >= record.last_seen_at + idle
        ):
            return None
        person = await self._reading(lambda: self._store.get_person(record.login))
        if (
            person is None
            or person.disabled_at is not None
            or (person.tenant_id, person.user_id) != (record.tenant_id, record.user_id)
        ):
            return None
        if now - record.last_seen_at >= _TOUCH_EVERY:
            await anyio.to_thread.run_sync(lambda: self._store.touch_session(key, at=now))
        return ConsoleSession(
            token=token,
            record=record,
            person=person,
            principal=person.principal(),
            csrf=csrf_token(token),
        )

    # --- logging in and out -------------------------------------------------------------------

    async def login(
        self, login: str, password: str, *, client: str, replacing: str | None = None
    ) -> LoginResult:
        """Check a login; a new session's token, or RATE_LIMITED / LOCKED_OUT / UNAUTHENTICATED.

        `client` is the address the per-client rate limit counts; `replacing` is the
        session cookie the browser brought, revoked on success (a new token always).
        An unknown login, a disabled person and a wrong password give the same answer.
        """
        limited = await self._limited(client)
        if limited is not None:
            return limited
        person = None
        if valid_login(login):
            person = await self._reading(lambda: self._store.get_person(login))
        now = self._clock.now()
        if person is not None and person.locked_at(now):
            await self._note(person, login, "refused", ServiceCode.LOCKED_OUT, client)
            return LoginResult(code=ServiceCode.LOCKED_OUT)
        if person is None:
            await anyio.to_thread.run_sync(lambda: self._passwords.verify_nothing(password))
            await self._note(None, login, "refused", ServiceCode.UNAUTHENTICATED, client)
            return LoginResult(code=ServiceCode.UNAUTHENTICATED)
        stored = person.password_hash
        right = await anyio.to_thread.run_sync(lambda: self._passwords.verify(stored, password))
        if not right:
            return await self._failed(person, client)
        if person.disabled_at is not None:
            await self._note(person, login, "refused", ServiceCode.UNAUTHENTICATED, client)
            return LoginResult(code=ServiceCode.UNAUTHENTICATED)
        token = await anyio.to_thread.run_sync(lambda: self._open(person, password, replacing))
        await self._note(person, login, "allowed", None, client)
        return LoginResult(token=token)

    async def _limited(self, client: str) -> LoginResult | None:
        """RATE_LIMITED with its wait when this client has tried too often, else None."""
        try:
            if await self._window.hit(self._rate, "console-login", client):
                return None
            stats = await self._window.get_window_stats(self._rate, "console-login", client)
        except StorageError:
            _log.warning("the login rate-limit storage failed; refusing the login")
            return LoginResult(code=ServiceCode.UNAVAILABLE)
        # `limits` keeps its windows on time.time(), not on the injected clock.
        wait = max(1, int(stats.reset_time - time.time()) + 1)
        return LoginResult(code=ErrorCode.RATE_LIMITED, retry_after=wait)

    async def _failed(self, person: PersonRecord, client: str) -> LoginResult:
        now = self._clock.now()
        until = now + timedelta(minutes=self._config.lockout_minutes)
        after = await anyio.to_thread.run_sync(
            lambda: self._store.record_failed_login(
                person.login, at=now, max_failed=self._config.max_failed_logins, lock_until=until
            )
        )
        if after is not None and after.locked_at(now):
            await self._note(person, person.login, "locked", ServiceCode.LOCKED_OUT, client)
            return LoginResult(code=ServiceCode.LOCKED_OUT)
        await self._note(person, person.login, "refused", ServiceCode.UNAUTHENTICATED, client)
        return LoginResult(code=ServiceCode.UNAUTHENTICATED)

    def _open(self, person: PersonRecord, password: str, replacing: str | None) -> str:
        """A new session for a person who just proved their password (blocking)."""
        now = self._clock.now()
        if replacing is not None and valid_token(replacing):
            self._store.revoke_session(session_hash(replacing), at=now)
        rehash = self._passwords.needs_rehash(person.password_hash)
        if person.failed_logins or rehash:
            # One try: a concurrent change wins, and the count is cleared next time.
            self._store.replace_person(
                _fresh(person, self._passwords.hash(password) if rehash else None, now),
                expect_version=person.version,
            )
        for _ in range(3):
            token = draw_token(self._random)
            record = SessionRecord(
                session_hash=session_hash(token),
                login=person.login,
                tenant_id=person.tenant_id,
                user_id=person.user_id,
                created_at=now,
                last_seen_at=now,
                expires_at=now + timedelta(minutes=self._config.session_minutes),
            )
            if self._store.insert_session(record):
                return token
        msg = "could not draw an unused session token (is the random source broken?)"
        raise RuntimeError(msg)

    async def logout(self, session: ConsoleSession, *, client: str) -> None:
        """Revoke the session at once (on every worker: it lives in the store)."""
        now = self._clock.now()
        key = session.record.session_hash
        await anyio.to_thread.run_sync(lambda: self._store.revoke_session(key, at=now))
        await self._note(session.person, session.person.login, "logout", None, client)

    # --- cookies and the login form's CSRF token ----------------------------------------------

    def set_session_cookie(self, response: Response, token: str) -> None:
        """The session cookie: HttpOnly, SameSite=Strict, Secure per config, host-only."""
        response.set_cookie(
            self.session_cookie,
            token,
            max_age=self._config.session_minutes * 60,
            path="/",
            secure=self._secure,
            httponly=True,
            samesite="strict",
        )

    def clear_session_cookie(self, response: Response) -> None:
        """Tell the browser to forget its session cookie."""
        response.delete_cookie(
            self.session_cookie, path="/", secure=self._secure, httponly=True, samesite="strict"
        )

    def login_form_token(self, request: Request) -> tuple[str, bool]:
        """The login form's cookie token (drawn when missing or malformed), and whether new."""
        found = request.cookies.get(self.login_cookie)
        if found is not None and valid_token(found):
            return found, False
        return draw_token(self._random), True

    def set_login_cookie(self, response: Response, token: str) -> None:
        """The login form's cookie: its CSRF token is derived from it (double submit)."""
        response.set_cookie(
            self.login_cookie,
            token,
            max_age=_LOGIN_FORM_MINUTES * 60,
            path="/",
            secure=self._secure,
            httponly=True,
            samesite="strict",
        )

    # --- helpers ------------------------------------------------------------------------------

    async def _reading(self, read: Callable[[], T]) -> T:
        if self._reads_block:
            return await anyio.to_thread.run_sync(read)
        return read()

    async def _note(
        self,
        person: PersonRecord | None,
        login: str,
        decision: str,
        code: str | None,
        client: str,
    ) -> None:
        note = functools.partial(
            self._auditor.note,
            kind="console_login",
            stage="login" if decision != "logout" else "logout",
            decision=decision,
            code=code,
            subject=AuditSubject(
                user_id=None if person is None else person.user_id,
                tenant_id=None if person is None else person.tenant_id,
            ),
            facts={"login": login if person is not None else None, "client": client},
        )
        await anyio.to_thread.run_sync(note)


def _fresh(person: PersonRecord, new_hash: str | None, now: datetime) -> PersonRecord:
    return dataclasses.replace(
        person,
        failed_logins=0,
        password_hash=new_hash or person.password_hash,
        updated_at=now,
        version=person.version + 1,
    )
