"""Test fixtures: a real PostgreSQL, and a fresh database per test cloned from a template.

The server is ``$FAIRSCHED_TEST_DATABASE_URL`` when set, else an embedded server
under the system temp directory (its data reused across runs), stopped when the test
session ends. Each test gets its own database created from a template that holds the
migrated schema, so tests (including multi-process ones) never see each other's rows
(made ahead of the test and dropped behind it: ``database_support.Copies``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from database_support import Copies, database_copy, with_database
from psycopg import sql
from worker_support import Workers, running_workers

from fairsched import Client, QueueSettings, Settings
from fairsched.db.migrate import migrate, migrations_dir

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

collect_ignore_glob = ["apps/*.py", "web/readme_screenshot.py"]
"""Handler modules the worker processes import (some configure the process they run in
at import) and a script: never imported by the doctest collection."""

TIERS = ("unit", "db", "processes", "faults", "web")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier from its folder, so ``-m db`` selects what ``tests/db``
    holds; doctests are unit tests."""
    for item in items:
        folder = item.path.parent.name
        if isinstance(item, pytest.DoctestItem):
            item.add_marker("unit")
        elif folder in TIERS:
            item.add_marker(folder)


@pytest.fixture(autouse=True)
def faults_alone(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist, a test of the faults tier runs while no other test does: it
    kills, stops and starves processes against leases and deadlines that a second busy
    process would stretch. The other tests share a lock file; a fault test takes it
    alone, through a turnstile that holds back the next shared takers meanwhile."""
    if not hasattr(request.config, "workerinput"):
        yield
        return
    root = tmp_path_factory.getbasetemp().parent  # the workers' common folder
    alone = request.node.get_closest_marker("faults") is not None
    mode = fcntl.LOCK_EX if alone else fcntl.LOCK_SH
    with (root / "faults.turnstile").open("a") as turnstile, (root / "faults.lock").open("a") as lock:
        fcntl.flock(turnstile, mode)
        fcntl.flock(lock, mode)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield


def _server_dsn() -> str:
    url = os.environ.get("FAIRSCHED_TEST_DATABASE_URL")
    if url:
        return url
    from fairsched.db.embedded import embedded_dsn

    data_dir = Path(tempfile.gettempdir()) / f"fairsched-test-pg-{os.getuid()}"
    return embedded_dsn(data_dir, database="postgres", keep_running=False)


def _migrations_hash() -> str:
    """The engine's migration files and every installed policy's, by name and content, and
    the code that applies them."""
    from fairsched.db import migrate

    digest = hashlib.sha256(Path(migrate.__file__).read_bytes())
    for path in sorted(migrations_dir().glob("*.sql")):
        digest.update(path.name.encode() + path.read_bytes())
    for policy, folder in sorted(migrate.installed_policy_migrations().items()):
        files = sorted(folder.iterdir(), key=lambda f: f.name) if folder is not None else []
        for file in (f for f in files if f.is_file() and f.name.endswith(".sql")):
            digest.update(f"{policy}:{file.name}".encode() + file.read_bytes())
    return digest.hexdigest()[:12]


@pytest.fixture(scope="session")
def server_dsn() -> str:
    """DSN of the test server's maintenance database."""
    return _server_dsn()


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> str:
    """Name of a database holding the migrated schema, keyed by the migrations' content."""
    name = f"fairsched_tpl_{_migrations_hash()}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(4242)")
        try:
            exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                building = name + "_build"
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(building))
                )
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
                with psycopg.connect(with_database(server_dsn, building), autocommit=True) as conn:
                    migrate(conn)
                admin.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(building), sql.Identifier(name)
                    )
                )
                template_stamp(admin, name)
                stale_templates_drop(admin, keep=name)
        finally:
            admin.execute("SELECT pg_advisory_unlock(4242)")
    return name


TEMPLATE_STAMP = "fairsched test template, built at epoch "
STALE_TEMPLATE_SECONDS = 6 * 3600
"""A template of other migrations is dropped once it is this old: until then another
checkout (a branch with a new migration) may still be running its tests on it."""


def _built_at(comment: str | None) -> float:
    if comment and comment.startswith(TEMPLATE_STAMP):
        with suppress(ValueError):
            return float(comment.removeprefix(TEMPLATE_STAMP))
    return 0.0


def template_stamp(admin: psycopg.Connection, name: str, built_at: float | None = None) -> None:
    """Record when a template was built, in its database comment."""
    stamp = f"{TEMPLATE_STAMP}{built_at if built_at is not None else time.time():.0f}"
    admin.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(stamp)))


def stale_templates_drop(admin: psycopg.Connection, *, keep: str) -> None:
    """Drop the templates of other migration sets built more than
    :data:`STALE_TEMPLATE_SECONDS` ago (or never stamped): each change to ``migrations/``
    would otherwise leave one behind on the server. A recent one may serve a test run of
    another checkout, and one another session is copying right now stays too (its copy
    holds a lock the drop would wait for)."""
    rows = admin.execute(
        "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database"
        " WHERE datname LIKE 'fairsched\\_tpl\\_%%' AND datname <> %s",
        (keep,),
    ).fetchall()
    stale = [(name,) for name, comment in rows if _built_at(comment) < time.time() - STALE_TEMPLATE_SECONDS]
    admin.execute("SET lock_timeout = '1s'")
    try:
        for (name,) in stale:
            with suppress(psycopg.errors.ObjectInUse, psycopg.errors.LockNotAvailable):
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    finally:
        admin.execute("RESET lock_timeout")


@pytest.fixture(scope="session")
def template_copies(server_dsn: str, template_db: str) -> Iterator[Copies]:
    """The tests' copies of the template, made ahead and dropped behind them."""
    copies = Copies(server_dsn, template_db)
    try:
        yield copies
    finally:
        copies.close()


@pytest.fixture
def fresh_db(server_dsn: str, template_copies: Copies) -> Iterator[str]:
    """DSN of a new database with the schema applied; dropped after the test."""
    name = template_copies.take()
    try:
        yield with_database(server_dsn, name)
    finally:
        template_copies.give_back(name)


@pytest.fixture(scope="session")
def large_backlog(server_dsn: str, template_db: str) -> Iterator[str]:
    """Name of the database of the plan tests' 1M-job backlog (``backlog_support``),
    built on first use and shared by pytest-xdist's workers: a template that they copy,
    never use directly."""
    from backlog_support import LargeBacklog  # imports the bench: only where asked for

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex  # one per run
    backlog = LargeBacklog(server_dsn, template_db, run)
    try:
        yield backlog.name
    finally:
        backlog.close()


@pytest.fixture
def empty_db(server_dsn: str, template_db: str) -> Iterator[str]:
    """DSN of a new database without the fairsched schema (migration tests). After the
    template: on a new server, the migrations' roles are created there first, not by two
    processes (pytest-xdist's workers) at once."""
    with database_copy(server_dsn) as dsn:
        yield dsn


FAST_QUEUE = QueueSettings(
    lease_seconds=30, backoff_base_seconds=0.0, backoff_max_seconds=0.0, max_attempts=3
)


@pytest.fixture
def client(fresh_db: str) -> Iterator[Client]:
    """A client on a fresh database with queue ``q`` declared (no retry delay)."""
    with Client(fresh_db, settings=Settings(max_payload_bytes=4096)) as c:
        c.declare_queue("q", FAST_QUEUE)
        yield c


@pytest.fixture
def workers(fresh_db: str, tmp_path: Path) -> Iterator[Workers]:
    """Real ``fairsched worker`` processes (the probe app) on the test database, reaped after."""
    with running_workers(fresh_db, tmp_path) as w:
        yield w


@pytest.fixture
def db(fresh_db: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to the test database, for direct inspection."""
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        yield conn


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans this process ends during the test (an in-memory exporter on an SDK tracer
    provider: ``tracing_support.listening``)."""
    from tracing_support import listening  # imports OpenTelemetry's SDK: only where asked for

    with listening() as exporter:
        yield exporter
