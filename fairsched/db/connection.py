"""Connections, and the one boundary where driver errors become fairsched errors."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache, partial
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool

from fairsched import metrics
from fairsched.errors import (
    DatabaseError,
    DatabaseUnavailable,
    FairschedError,
    InvalidInput,
    NotMigrated,
)

CONNECT_TIMEOUT_SECONDS = 10
"""How long opening a connection may take when the DSN sets no ``connect_timeout``."""

_PASSWORD = re.compile(r"(password=|://[^:/@\s]*:)[^@\s]*", re.IGNORECASE)


def redact(text: str) -> str:
    """Remove passwords from a DSN or from a message that may quote one."""
    return _PASSWORD.sub(r"\1***", text)


def translate(error: psycopg.Error) -> FairschedError:
    """Map a driver error to the fairsched error that tells the user what to do."""
    detail = redact(str(error).strip().splitlines()[0] if str(error).strip() else repr(error))
    if isinstance(error, pg_errors.UndefinedTable | pg_errors.InvalidSchemaName):
        return NotMigrated(f"fairsched schema is missing or outdated ({detail}): run `fairsched migrate`")
    if isinstance(error, pg_errors.IntegrityError | pg_errors.DataError):
        return InvalidInput(f"rejected by the database: {detail}")
    if isinstance(error, psycopg.OperationalError | pg_errors.AdminShutdown):
        return DatabaseUnavailable(f"cannot reach PostgreSQL: {detail}")
    return DatabaseError(f"database error: {detail}")


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


def make_pool(
    dsn: str,
    *,
    max_size: int,
    prepare_threshold: int | None = 5,
    configure: Callable[[psycopg.Connection], None] | None = None,
) -> ConnectionPool:
    """An autocommit connection pool; multi-statement work opens explicit transactions.
    Every new connection decodes JSON as text (:func:`json_from_text`), then runs
    ``configure``."""

    def setup(conn: psycopg.Connection) -> None:
        json_from_text(conn)
        if configure is not None:
            configure(conn)

    pool = ConnectionPool(
        with_connect_timeout(dsn),
        min_size=1,
        max_size=max(1, max_size),
        kwargs={"autocommit": True, "prepare_threshold": prepare_threshold},
        configure=setup,
        open=False,
        name="fairsched",
        reconnect_timeout=300,
    )
    return pool


def json_from_text(conn: psycopg.Connection) -> None:
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


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection:
    """One connection outside the pool (migrations, LISTEN)."""
    try:
        return psycopg.connect(with_connect_timeout(dsn), autocommit=autocommit)
    except psycopg.Error as e:
        raise translate(e) from e
