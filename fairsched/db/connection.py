"""Connections, and the one boundary where driver errors become fairsched errors."""

from __future__ import annotations

import enum
import json
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from fairsched import metrics
from fairsched.errors import (
    DatabaseError,
    DatabaseUnavailable,
    FairschedError,
    InvalidInput,
    NotMigrated,
)
from fairsched.settings import Settings

CONNECT_TIMEOUT_SECONDS = 10
"""How long opening a connection may take when the DSN sets no ``connect_timeout``."""
POOL_OPEN_TIMEOUT_SECONDS = 15.0
"""How long a client's first use waits for its pool's first connection, before it asks
the server why there is none."""

_PASSWORD = re.compile(r"(password=|://[^:/@\s]*:)[^@\s]*", re.IGNORECASE)


def redact(text: str) -> str:
    """Remove passwords from a DSN or from a message that may quote one."""
    return _PASSWORD.sub(r"\1***", text)


_LIMIT_SETTINGS: dict[type[psycopg.Error], str] = {
    pg_errors.LockNotAvailable: "lock_timeout_seconds",
    pg_errors.QueryCanceled: "operator_statement_timeout_seconds",
    pg_errors.IdleInTransactionSessionTimeout: "idle_in_transaction_timeout_seconds",
}
"""Errors a session limit (:data:`ROLE_LIMITS`) raises, and the setting behind each."""
_IDLE_ENDED = "idle-in-transaction timeout"
"""The server's words when it ends an idle transaction's session: some psycopg releases
report it as a plain connection failure, without its SQLSTATE."""


def translate(error: psycopg.Error) -> FairschedError:
    """Map a driver error to the fairsched error that tells the user what to do."""
    detail = redact(str(error).strip().splitlines()[0] if str(error).strip() else repr(error))
    if isinstance(error, pg_errors.UndefinedTable | pg_errors.InvalidSchemaName):
        return NotMigrated(f"fairsched schema is missing or outdated ({detail}): run `fairsched migrate`")
    if isinstance(error, pg_errors.IntegrityError | pg_errors.DataError):
        return InvalidInput(f"rejected by the database: {detail}")
    for kind, setting in _LIMIT_SETTINGS.items():
        if isinstance(error, kind) or (setting.startswith("idle") and _IDLE_ENDED in detail):
            return DatabaseError(f"{detail} (a session limit: {setting}; docs/operations.md, Bounded stalls)")
    if "unsupported startup parameter: options" in detail:
        return DatabaseUnavailable(
            f"cannot reach PostgreSQL: {detail} (a pooler such as PgBouncer: add "
            "`ignore_startup_parameters = options` to its configuration; docs/operations.md, Bounded stalls)"
        )
    if isinstance(error, psycopg.OperationalError | pg_errors.AdminShutdown):
        return DatabaseUnavailable(f"cannot reach PostgreSQL: {detail}")
    return DatabaseError(f"database error: {detail}")


def idle(conn: psycopg.Connection) -> bool:
    """Whether ``conn`` is outside a transaction (what commits now is committed for good)."""
    return conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@contextmanager
def operation(name: str) -> Iterator[None]:
    """Instrument one database operation (duration, outcome) and translate its errors."""
    start = time.perf_counter()
    outcome = "ok"
    try:
        yield
    except psycopg.Error as e:
        outcome = "error"
        raise translate(e) from e
    except BaseException:
        outcome = "error"
        raise
    finally:
        metrics.DB_OPERATION_SECONDS.labels(name, outcome).observe(time.perf_counter() - start)


def with_connect_timeout(dsn: str) -> str:
    """``dsn`` with ``connect_timeout`` set, unless it sets one: a server that never
    answers fails the command instead of hanging it.

    >>> with_connect_timeout("host=db dbname=app")
    'dbname=app host=db connect_timeout=10'
    >>> with_connect_timeout("postgresql://db/app?connect_timeout=3")
    'postgresql://db/app?connect_timeout=3'
    >>> with_connect_timeout("postgresql://app@db/app")
    'user=app dbname=app host=db connect_timeout=10'
    """
    if "connect_timeout" in conninfo_to_dict(dsn):
        return dsn
    return make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_SECONDS)


class Role(enum.StrEnum):
    """What a session is for, which decides its server-side limits (:data:`ROLE_LIMITS`)."""

    WORKER = "worker"
    """Transitions and maintenance: completions, heartbeats, enqueues, recovery, heads
    refresh, config apply (a :class:`~fairsched.client.Client`'s main pool)."""
    CLAIMS = "claims"
    """Claims: they pass locked rows (``SKIP LOCKED``) instead of waiting for them."""
    OPERATOR = "operator"
    """Operator queries: status, exporter, tenant show, simulate."""
    MIGRATIONS = "migrations"
    """Schema changes: they wait for the migration lock and may run long."""


IDLE_IN_TRANSACTION = "idle_in_transaction_session_timeout"
LOCK_WAIT = "lock_timeout"
STATEMENT_TIME = "statement_timeout"

ROLE_LIMITS: dict[Role, tuple[str, ...]] = {
    Role.WORKER: (IDLE_IN_TRANSACTION, LOCK_WAIT),
    Role.CLAIMS: (IDLE_IN_TRANSACTION,),
    Role.OPERATOR: (IDLE_IN_TRANSACTION, LOCK_WAIT, STATEMENT_TIME),
    Role.MIGRATIONS: (IDLE_IN_TRANSACTION,),
}
"""The one place that decides which server-side limits each role's sessions set: every
session is ended by the server when it sits idle inside a transaction (a frozen process
releases its locks); maintenance and operator sessions give up lock waits; operator
queries are cut off when they run too long. Values come from :class:`Settings`."""


@dataclass(frozen=True)
class SessionLimits:
    """Server-side limits one session sets at connect, in seconds (0: not set by fairsched,
    the server's or role's own setting applies)."""

    idle_in_transaction_session_timeout: float = 0.0
    lock_timeout: float = 0.0
    statement_timeout: float = 0.0

    @classmethod
    def for_role(cls, role: Role, settings: Settings | None = None) -> SessionLimits:
        """The limits of ``role``'s sessions (:data:`ROLE_LIMITS`), valued from ``settings``
        (the settings' defaults when ``None``)."""
        s = settings if settings is not None else Settings.model_construct()
        values = {
            IDLE_IN_TRANSACTION: s.idle_in_transaction_timeout_seconds,
            LOCK_WAIT: s.lock_timeout_seconds,
            STATEMENT_TIME: s.operator_statement_timeout_seconds,
        }
        return cls(**{name: values[name] for name in ROLE_LIMITS[role]})

    def options(self) -> str:
        """libpq startup ``options`` that set these limits (whole milliseconds, at least 1).

        >>> SessionLimits(idle_in_transaction_session_timeout=10, lock_timeout=0.0005).options()
        '-c idle_in_transaction_session_timeout=10000 -c lock_timeout=1'
        """
        limits = [
            (IDLE_IN_TRANSACTION, self.idle_in_transaction_session_timeout),
            (LOCK_WAIT, self.lock_timeout),
            (STATEMENT_TIME, self.statement_timeout),
        ]
        return " ".join(
            f"-c {name}={max(1, round(seconds * 1000))}" for name, seconds in limits if seconds > 0
        )


def with_session_limits(dsn: str, limits: SessionLimits) -> str:
    """``dsn`` with ``limits`` in its startup ``options``, ahead of any options the DSN (or,
    when it sets none, ``PGOPTIONS``) gives, which win for the settings they name.

    Startup options are applied by the server before the first statement, on every
    connection and reconnection, and stay with that one session. PgBouncer rejects
    them unless told ``ignore_startup_parameters = options`` (then the limits come from
    the pooler or the server role: docs/operations.md, Bounded stalls).

    >>> with_session_limits("host=db", SessionLimits(lock_timeout=5))
    "host=db options='-c lock_timeout=5000'"
    >>> with_session_limits("host=db options='-c lock_timeout=1s'", SessionLimits(lock_timeout=5))
    "host=db options='-c lock_timeout=5000 -c lock_timeout=1s'"
    >>> with_session_limits("host=db", SessionLimits())
    'host=db'
    """
    ours = limits.options()
    if not ours:
        return dsn
    theirs = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
    return make_conninfo(dsn, options=f"{ours} {theirs}".strip())


def session_conninfo(dsn: str, role: Role, settings: Settings | None = None) -> str:
    """What fairsched connects with for a session of ``role``: ``dsn`` with a connect
    timeout (:func:`with_connect_timeout`) and the role's limits (:func:`with_session_limits`)."""
    return with_session_limits(with_connect_timeout(dsn), SessionLimits.for_role(role, settings))


def make_pool(
    dsn: str,
    *,
    max_size: int,
    prepare_threshold: int | None = 5,
    configure: Callable[[psycopg.Connection], None] | None = None,
    role: Role = Role.OPERATOR,
    settings: Settings | None = None,
) -> ConnectionPool:
    """An autocommit connection pool; multi-statement work opens explicit transactions.
    Every new connection decodes JSON as text (:func:`json_from_text`), then runs
    ``configure``. Its sessions set ``role``'s limits (:data:`ROLE_LIMITS`) from
    ``settings``; a pool outside a :class:`~fairsched.client.Client` (the exporter's)
    serves operator queries."""

    def setup(conn: psycopg.Connection) -> None:
        json_from_text(conn)
        if configure is not None:
            configure(conn)

    pool = ConnectionPool(
        session_conninfo(dsn, role, settings), configure=setup, **pool_options(max_size, prepare_threshold)
    )
    return pool


def make_async_pool(
    dsn: str,
    *,
    max_size: int,
    prepare_threshold: int | None = 5,
    configure: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None = None,
    role: Role = Role.OPERATOR,
    settings: Settings | None = None,
) -> AsyncConnectionPool:
    """:func:`make_pool` for :class:`~fairsched.asyncclient.AsyncClient`: the same
    sessions, on :class:`psycopg.AsyncConnection`; ``configure`` is awaited."""

    async def setup(conn: psycopg.AsyncConnection[Any]) -> None:
        json_from_text(conn)
        if configure is not None:
            await configure(conn)

    return AsyncConnectionPool(
        session_conninfo(dsn, role, settings), configure=setup, **pool_options(max_size, prepare_threshold)
    )


def pool_options(max_size: int, prepare_threshold: int | None) -> dict[str, Any]:
    """What every fairsched pool, sync or async, is opened with but its conninfo and
    ``configure``: autocommit sessions, made as needed up to ``max_size``."""
    return {
        "min_size": 1,
        "max_size": max(1, max_size),
        "kwargs": {"autocommit": True, "prepare_threshold": prepare_threshold},
        "open": False,
        "name": "fairsched",
        "reconnect_timeout": 300,
    }


def json_from_text(conn: psycopg.Connection | psycopg.AsyncConnection[Any]) -> None:
    """Load ``conn``'s json and jsonb results by decoding them to text first: given
    bytes, ``json.loads`` sniffs their encoding in Python before it parses (~2 µs a
    value, once per claimed job's payload). PostgreSQL sends them in the client encoding."""
    set_json_loads(_json_loads(conn.info.encoding), conn)


@lru_cache
def _json_loads(encoding: str) -> Callable[[str | bytes], Any]:
    """One function per encoding: psycopg makes a loader class per function it is given."""
    return partial(_decode_json, encoding)


def _decode_json(encoding: str, data: str | bytes) -> Any:
    return json.loads(data.decode(encoding) if isinstance(data, bytes) else data)


def connect(
    dsn: str, *, autocommit: bool = True, role: Role = Role.WORKER, settings: Settings | None = None
) -> psycopg.Connection:
    """One connection outside the pool (migrations, LISTEN, checks), with ``role``'s limits
    (:data:`ROLE_LIMITS`) from ``settings``."""
    try:
        return psycopg.connect(session_conninfo(dsn, role, settings), autocommit=autocommit)
    except psycopg.Error as e:
        raise translate(e) from e


def caller_connection(
    conn: object, accepted: type[psycopg.Connection] | type[psycopg.AsyncConnection[Any]]
) -> None:
    """Refuse a ``conn=`` that is not a connection of the ``accepted`` psycopg 3 class
    (a psycopg2 or sqlite3 connection, or the sync kind given to the async client)."""
    if not isinstance(conn, accepted):
        kind = f"{type(conn).__module__}.{type(conn).__qualname__}"
        raise InvalidInput(
            f"conn must be a psycopg 3 {accepted.__module__}.{accepted.__name__}, got a {kind} "
            "(docs/async.md: the connection of Django's psycopg backend or SQLAlchemy's psycopg dialect)"
        )
