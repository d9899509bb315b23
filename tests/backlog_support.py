"""The plan tests' large backlog: a million jobs, built once per test run.

Building it takes the better part of a minute; copying a database takes seconds. The
``large_backlog`` fixture (tests/conftest.py) builds it on first use as a template, and
each plan module (tests/db/test_claim_plans.py, tests/db/test_operator_plans.py,
tests/web/test_page_plans.py) takes a copy and adds what it needs: its other queues,
dead jobs, delayed ones, history, then VACUUM ANALYZE. Their smaller backlogs come from
:func:`backlog_fill` too, so both sizes differ only in their number of jobs.

The processes of one run (pytest-xdist's workers) share it: :class:`LargeBacklog`.
"""

from __future__ import annotations

import psycopg
from database_support import DB_PREFIX
from psycopg import sql

from bench.claimbench import backlog_build
from fairsched import Client, QueueSettings
from fairsched.testing.databases import database_create, database_drop, with_database

QUEUE = "big"
"""The backlog's queue (stack weighted + serial: the plan modules set the one they need)."""
TENANTS = 1000
AGGREGATES = 10_000
LARGE_JOBS = 1_000_000


def backlog_fill(dsn: str, jobs: int) -> None:
    """Declare :data:`QUEUE` in database ``dsn`` and fill it with ``jobs`` jobs of
    :data:`TENANTS` tenants, their share rows and :data:`AGGREGATES` aggregates, a few
    expired leases (``bench.claimbench.backlog_build``); VACUUM ANALYZE."""
    with Client(dsn) as client:
        client.declare_queue(QUEUE, QueueSettings(policies=["weighted", "serial"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        backlog_build(conn, QUEUE, jobs=jobs, tenants=TENANTS, aggregates=AGGREGATES)


class LargeBacklog:
    """The :data:`LARGE_JOBS` backlog of test run ``run_id``, shared by its processes: the
    first to ask builds it (the others wait on a build lock, then find it), and each holds
    a shared lock on it while its tests may copy it; the last to let go drops it."""

    def __init__(self, server_dsn: str, template_db: str, run_id: str) -> None:
        self.name = f"{DB_PREFIX}backlog_{run_id[:12]}"
        self._server = server_dsn
        self._held = psycopg.connect(server_dsn, autocommit=True)
        self._held.execute("SELECT pg_advisory_lock_shared(hashtext(%s), 1)", [self.name])
        try:
            with psycopg.connect(server_dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_advisory_lock(hashtext(%s), 2)", [self.name])
                if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [self.name]).fetchone():
                    self._build(admin, template_db)
        except BaseException:
            self._held.close()
            raise

    def _build(self, admin: psycopg.Connection, template_db: str) -> None:
        """Fill a new copy of the template, then give it the backlog's name: a build that
        failed half way is never found."""
        building = database_create(self._server, template=template_db, prefix=DB_PREFIX)
        try:
            backlog_fill(with_database(self._server, building), LARGE_JOBS)
            rename = sql.SQL("ALTER DATABASE {} RENAME TO {}")
            admin.execute(rename.format(sql.Identifier(building), sql.Identifier(self.name)))
        except BaseException:
            database_drop(self._server, building)
            raise

    def close(self) -> None:
        """Let go of the backlog; drop it unless another process still holds it."""
        with self._held:
            self._held.execute("SELECT pg_advisory_unlock_shared(hashtext(%s), 1)", [self.name])
            last = self._held.execute("SELECT pg_try_advisory_lock(hashtext(%s), 1)", [self.name]).fetchone()
            if last == (True,):
                database_drop(self._server, self.name)
