"""The recovery example's downstream systems: a ticket service and a collection monitor.

The ticket service is a component of its own with its own SQLite file, not Handrail's
store. It dedupes by the idempotency key Handrail passes it: one INSERT that the UNIQUE
constraint settles (never check-then-insert), so a repeated or concurrent request with
the same key gets the ticket the first one created. `find(key)` answers reconciliation.
`ResponseLoss` plays the network between Handrail and the service: armed, it loses the
service's answer after the service committed. The collection monitor says why an asset
stopped collecting: error codes, times and evidence ids only, scoped by tenant. The
collectors' logs are large text with everything a real log leaks (a password, an
internal address, an e-mail), generated line by line as they are read.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from handrail import Clock, SystemClock

__all__ = [
    "DEFAULT_LOG_LINES",
    "DEMO_SETUP",
    "CollectStatus",
    "CollectionMonitor",
    "CollectorLogs",
    "CollectorSetup",
    "IdempotencyKeyReusedError",
    "Priority",
    "ResponseLoss",
    "ServiceUnavailableError",
    "Ticket",
    "TicketService",
]

Priority = Literal["LOW", "MEDIUM", "HIGH"]

_metadata = sa.MetaData()

tickets = sa.Table(
    "tickets",
    _metadata,
    sa.Column("ticket_no", sa.String(16), primary_key=True),
    sa.Column("tenant_id", sa.String(64), nullable=False),
    sa.Column("idempotency_key", sa.String(128), nullable=False, unique=True),
    sa.Column("asset_id", sa.String(64), nullable=False),
    sa.Column("reason", sa.String(500), nullable=False),
    sa.Column("priority", sa.String(8), nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
)

# The source of ticket numbers. A number taken by a request that then finds its key
# already used is rolled back with it, so numbers stay dense: TK-0001, TK-0002, ...
ticket_numbers = sa.Table(
    "ticket_numbers",
    _metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sqlite_autoincrement=True,
)


class ServiceUnavailableError(Exception):
    """The ticket service cannot answer: its database is missing, locked or broken."""


class IdempotencyKeyReusedError(Exception):
    """The key already names a ticket with other contents; nothing was created."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Ticket:
    """One recovery ticket as the service stores it."""

    ticket_no: str
    tenant_id: str
    idempotency_key: str
    asset_id: str
    reason: str
    priority: str
    created_at: str

    def view(self) -> dict[str, str]:
        """What the service answers a caller: the ticket without the caller's key."""
        return {
            "ticket_no": self.ticket_no,
            "asset_id": self.asset_id,
            "priority": self.priority,
            "reason": self.reason,
            "created_at": self.created_at,
        }


class ResponseLoss:
    """The network between Handrail and the ticket service, able to lose answers.

    `arm(n)` makes the next `n` calls lose their response after the service has
    committed; `consume()` is asked once per call. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = 0

    def arm(self, count: int = 1) -> None:
        """Lose the responses of the next `count` calls."""
        with self._lock:
            self._pending += count

    def consume(self) -> bool:
        """Whether this call's response is lost."""
        with self._lock:
            if self._pending <= 0:
                return False
            self._pending -= 1
            return True


def _set_pragmas(dbapi_connection: Any, _record: object) -> None:  # noqa: ANN401 - DB-API
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=5000")
    finally:
        cursor.close()


class TicketService:
    """The ticket service over its own SQLite file.

    Opening touches nothing; `reset` (re)creates the file. While the file is missing
    every call raises ServiceUnavailableError: the service never creates its database
    as a side effect of a query.
    """

    def __init__(self, path: Path, *, clock: Clock | None = None) -> None:
        self._path = path
        self._clock = clock or SystemClock()
        uri = f"{path.resolve().as_uri()}?mode=rw"
        self._engine = sa.create_engine(
            "sqlite+pysqlite://",
            creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False),
            # A file shared by threads: a pool of connections, not one per thread.
            poolclass=sa.pool.QueuePool,
        )
        sa.event.listen(self._engine, "connect", _set_pragmas)
        self._calls_lock = threading.Lock()
        self._create_calls = 0

    @classmethod
    def open(cls, path: str | Path, *, clock: Clock | None = None) -> TicketService:
        """The service on the file at `path`; nothing is read or created yet."""
        return cls(Path(path), clock=clock)

    @property
    def path(self) -> Path:
        """The service's database file."""
        return self._path

    @property
    def create_calls(self) -> int:
        """How many times `create` was called in this process (answered or not)."""
        with self._calls_lock:
            return self._create_calls

    def reset(self) -> None:
        """Create the file if needed, then drop and recreate the tables, empty."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        sqlite3.connect(self._path).close()
        with _service_errors():
            _metadata.drop_all(self._engine)
            _metadata.create_all(self._engine)

    def create(
        self,
        idempotency_key: str,
        tenant: str,
        asset_id: str,
        reason: str,
        priority: Priority,
        *,
        lose_response: bool = False,
    ) -> Ticket:
        """Create the ticket for `idempotency_key`, or return the one it already names.

        The INSERT and its UNIQUE key decide, so concurrent duplicates get one ticket.
        A key that names a ticket with other contents raises IdempotencyKeyReusedError.
        With `lose_response`, the service commits and then the answer is lost: the
        caller gets TimeoutError although the ticket exists.
        """
        with self._calls_lock:
            self._create_calls += 1
        created_at = self._clock.now().isoformat()
        with _service_errors(), self._engine.connect() as connection:
            transaction = connection.begin()
            seq = connection.execute(
                ticket_numbers.insert().returning(ticket_numbers.c.seq)
            ).scalar_one()
            ticket = Ticket(
                ticket_no=f"TK-{seq:04d}",
                tenant_id=tenant,
                idempotency_key=idempotency_key,
                asset_id=asset_id,
                reason=reason,
                priority=priority,
                created_at=created_at,
            )
            inserted = connection.execute(
                sqlite.insert(tickets)
                .values(_row(ticket))
                .on_conflict_do_nothing(index_elements=["idempotency_key"])
                .execution_options(preserve_rowcount=True),
            ).rowcount
            if inserted == 1:
                transaction.commit()
            else:
                transaction.rollback()
                found = self._find(connection, idempotency_key)
                if found is None:  # pragma: no cover - a ticket is never deleted
                    raise ServiceUnavailableError("a conflicting ticket vanished")
                if replace(found, ticket_no="", created_at="") != replace(
                    ticket, ticket_no="", created_at=""
                ):
                    raise IdempotencyKeyReusedError(
                        "this idempotency key already names a different ticket"
                    )
                ticket = found
        if lose_response:
            raise TimeoutError("the ticket service's response was lost after it committed")
        return ticket

    def find(self, idempotency_key: str) -> Ticket | None:
        """The ticket created under `idempotency_key`, or None if there is none."""
        with _service_errors(), self._engine.connect() as connection:
            return self._find(connection, idempotency_key)

    def count(self) -> int:
        """How many tickets the service holds."""
        with _service_errors(), self._engine.connect() as connection:
            statement = sa.select(sa.func.count()).select_from(tickets)
            return int(connection.execute(statement).scalar_one())

    def close(self) -> None:
        """Dispose of the connection pool."""
        self._engine.dispose()

    @staticmethod
    def _find(connection: sa.Connection, idempotency_key: str) -> Ticket | None:
        statement = sa.select(tickets).where(tickets.c.idempotency_key == idempotency_key)
        row = connection.execute(statement).mappings().first()
        return None if row is None else Ticket(**row)


def _row(ticket: Ticket) -> dict[str, str]:
    return {
        "ticket_no": ticket.ticket_no,
        "tenant_id": ticket.tenant_id,
        "idempotency_key": ticket.idempotency_key,
        "asset_id": ticket.asset_id,
        "reason": ticket.reason,
        "priority": ticket.priority,
        "created_at": ticket.created_at,
    }


@contextmanager
def _service_errors() -> Iterator[None]:
    try:
        yield
    except sa.exc.OperationalError as exc:
        raise ServiceUnavailableError(f"the ticket service's database failed: {exc.orig}") from exc


# --- the collection monitor ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectStatus:
    """Why one asset stopped collecting, as the collection system records it."""

    asset_id: str
    status: str
    reason_code: str
    occurred_at: str
    evidence_ids: tuple[str, ...]
    can_retry: bool

    def to_json(self) -> dict[str, Any]:
        """The status as the collection system's API returns it."""
        return {
            "assetId": self.asset_id,
            "status": self.status,
            "reasonCode": self.reason_code,
            "occurredAt": self.occurred_at,
            "evidenceIds": list(self.evidence_ids),
            "canRetry": self.can_retry,
        }

    @property
    def version(self) -> str:
        """Changes whenever the recorded failure changes: a new code or a new time."""
        return f"{self.reason_code}@{self.occurred_at}"


_SAMPLE: Mapping[tuple[str, str], CollectStatus] = {
    ("hospital-a", "asset-lis-result"): CollectStatus(
        asset_id="asset-lis-result",
        status="FAILED",
        reason_code="CONNECT_TIMEOUT",
        occurred_at="2025-12-31T23:40:00+00:00",
        evidence_ids=("log-801", "alarm-992"),
        can_retry=True,
    ),
    ("hospital-a", "asset-pacs-archive"): CollectStatus(
        asset_id="asset-pacs-archive",
        status="FAILED",
        reason_code="AUTH_REJECTED",
        occurred_at="2025-12-31T22:05:00+00:00",
        evidence_ids=("log-815",),
        can_retry=False,
    ),
    ("hospital-b", "asset-his-orders"): CollectStatus(
        asset_id="asset-his-orders",
        status="FAILED",
        reason_code="CONNECT_TIMEOUT",
        occurred_at="2025-12-31T21:30:00+00:00",
        evidence_ids=("log-9001",),
        can_retry=True,
    ),
}


class CollectionMonitor:
    """The collection system's status of each tenant's assets; tools only read it.

    `record` stands in for the collector reporting a new state (used by tests and the
    demo). Lookups take the tenant first: another tenant's asset is simply absent.
    """

    def __init__(self, statuses: Mapping[tuple[str, str], CollectStatus] = _SAMPLE) -> None:
        self._lock = threading.Lock()
        self._statuses = dict(statuses)

    def status(self, tenant_id: str, asset_id: str) -> CollectStatus | None:
        """The status of one of `tenant_id`'s assets, or None (also for others' assets)."""
        with self._lock:
            return self._statuses.get((tenant_id, asset_id))

    def record(self, tenant_id: str, status: CollectStatus) -> None:
        """The collector reports a new status for one of the tenant's assets."""
        with self._lock:
            self._statuses[tenant_id, status.asset_id] = status


# --- the collectors' logs --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectorSetup:
    """How the collectors reach their source system, and whom they page.

    A collector prints all of it when it starts, its source's password included: the
    kind of leak real logs hold, and the reason the model only ever sees a redacted view.
    """

    source_host: str
    source_password: str
    on_call: str

    @property
    def source_url(self) -> str:
        """The source's connection string, password and all."""
        return f"postgresql://svc:{self.source_password}@{self.source_host}/lis"


DEMO_SETUP = CollectorSetup(
    source_host="10.1.2.3",
    source_password="Lis-Svc-7rQ2-kept",  # noqa: S106 - a made-up password the demo hides
    on_call="lis-oncall@hospital-a.example",
)
"""The collectors' setup in the demo: an internal address, a password and an e-mail."""

DEFAULT_LOG_LINES = 200_000
"""Lines of one collector log: about 14 MB, far more than any model should read."""

_MIN_LOG_LINES = 40
_TICK_MS = 50
"""One log line every 50 ms."""
_EXIT_CODE = 3
_CRASHES: Mapping[str, str] = {
    "CONNECT_TIMEOUT": "ConnectionError",
    "AUTH_REJECTED": "PermissionError",
}
"""The exception a collector dies of, by the failure's reason code."""


class CollectorLogs:
    """Each asset's collector log, as the collection system keeps it; scoped by tenant.

    Synthetic and deterministic: a log is generated line by line while it is read, and
    never held whole. It tells the story of the recorded failure: the collector starts
    (and prints its setup), polls fine for a while, then fails with the status's reason
    code over and over; at the status's time it gives up with a traceback and an exit
    code, is restarted, and goes on failing to the end of the log.
    """

    def __init__(
        self,
        monitor: CollectionMonitor,
        *,
        setup: CollectorSetup = DEMO_SETUP,
        lines: int = DEFAULT_LOG_LINES,
    ) -> None:
        if lines < _MIN_LOG_LINES:
            raise ValueError(f"a collector log has at least {_MIN_LOG_LINES} lines")
        self._monitor = monitor
        self._setup = setup
        self._lines = lines

    @property
    def setup(self) -> CollectorSetup:
        """What the collectors print about themselves."""
        return self._setup

    def lines(self, tenant_id: str, asset_id: str) -> Iterator[str] | None:
        """The log of one of `tenant_id`'s assets, one line at a time (None: no such asset)."""
        status = self._monitor.status(tenant_id, asset_id)
        if status is None:
            return None
        return _collector_log(status, self._setup, self._lines)

    def size(self, tenant_id: str, asset_id: str) -> int | None:
        """The log's size in bytes (UTF-8), counted by generating it once more."""
        lines = self.lines(tenant_id, asset_id)
        return None if lines is None else sum(len(line.encode()) for line in lines)


def _collector_log(status: CollectStatus, setup: CollectorSetup, total: int) -> Iterator[str]:
    """The lines of one log: healthy, then failing, the crash at `status.occurred_at`."""
    crash_at = datetime.fromisoformat(status.occurred_at)
    crash_line = total * 3 // 4
    failing_from = total // 4
    start = crash_at - timedelta(milliseconds=crash_line * _TICK_MS)
    stamps = _Stamps(start)
    code = status.reason_code
    crash = _CRASHES.get(code, "RuntimeError")
    startup = (
        f"INFO  collector 4.2.1 starting for {status.asset_id}",
        f"INFO  on-call: {setup.on_call}",
        f"INFO  source: {setup.source_url}",
    )
    crashed = (
        "Traceback (most recent call last):",
        '  File "/opt/collector/lis/poll.py", line 212, in run',
        "    rows = self.source.fetch(since=self.cursor, timeout=30)",
        '  File "/opt/collector/lis/source.py", line 88, in fetch',
        "    raise self.error(code, host)",
        f"{crash}: {code} on {setup.source_host}:5432",
        f"INFO  supervisor: collector for {status.asset_id} exited with exit code {_EXIT_CODE}",
        "INFO  supervisor: collector restarted",
    )
    restarted = crash_line + 1 + len(crashed)
    attempts = 0
    for number in range(total):
        if number < len(startup):
            line = startup[number]
        elif number == crash_line:
            line = f"ERROR lis-poller: giving up after {attempts} attempts"
        elif crash_line < number < restarted:
            line = crashed[number - crash_line - 1]
        elif number < failing_from:
            line = f"INFO  lis-poller: poll {number} fetched {number % 37} results"
        else:
            # The restarted collector counts its attempts from one again.
            attempts = 1 if number == restarted else attempts + 1
            line = f"WARN  lis-poller: {code} from the source (attempt {attempts}); retrying in 2 s"
        yield f"{stamps.at(number * _TICK_MS)} {line}\n"


class _Stamps:
    """Timestamps of log lines (milliseconds after a start), formatted once per second."""

    def __init__(self, start: datetime) -> None:
        start = start.astimezone(UTC)
        self._whole = start.replace(microsecond=0)
        self._millis = start.microsecond // 1000
        self._second = -1
        self._prefix = ""

    def at(self, offset_ms: int) -> str:
        second, millis = divmod(self._millis + offset_ms, 1000)
        if second != self._second:
            self._second = second
            moment = self._whole + timedelta(seconds=second)
            self._prefix = moment.strftime("%Y-%m-%dT%H:%M:%S")
        return f"{self._prefix}.{millis:03d}Z"
