"""The plan tests' large backlog: a million jobs, built once per test session.

Building it takes the better part of a minute; copying a database takes seconds. The
``large_backlog`` fixture (tests/conftest.py) builds it on first use as a template, and
each plan module (tests/db/test_claim_plans.py, tests/db/test_operator_plans.py,
tests/web/test_page_plans.py) takes a copy and adds what it needs: its other queues,
dead jobs, delayed ones, history, then VACUUM ANALYZE. Their smaller backlogs come from
:func:`backlog_fill` too, so both sizes differ only in their number of jobs.
"""

from __future__ import annotations

import psycopg
from database_support import database_create, database_drop, with_database

from bench.claimbench import backlog_build
from fairsched import Client, QueueSettings

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


def large_backlog_build(server_dsn: str, template_db: str) -> str:
    """A new copy of ``template_db`` holding the :data:`LARGE_JOBS` backlog; its name."""
    name = database_create(server_dsn, template_db)
    try:
        backlog_fill(with_database(server_dsn, name), LARGE_JOBS)
    except BaseException:
        database_drop(server_dsn, name)
        raise
    return name
