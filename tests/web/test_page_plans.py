"""The dashboard's own statements and the engine reads its pages call cost O(queues +
tenants), never O(jobs) (DESIGN §9): planned and run on a 1M-job backlog of 1k tenants
(``backlog_support``: a thousand jobs each), each uses the index it names, never a Seq
Scan of fairsched.jobs, and reads a bounded number of shared buffers. (The status and
exporter statements the pages share with ``fairsched status`` are planned in
tests/db/test_operator_plans.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from backlog_support import QUEUE, TENANTS
from database_support import database_copy

from fairsched import Client, QueueSettings
from fairsched.db.sql import QUERIES
from tests.db.test_operator_plans import plan_of

DEAD = 12_000

EXTRAS = (
    # Dead jobs of every tenant, with a failed attempt each, and aggregates blocked by some.
    """INSERT INTO fairsched.jobs (queue_name, tenant, payload, status, finished_at, attempt_count,
                                   max_attempts, last_error_code, last_error)
       SELECT %(queue)s, 't' || (g %% 1000), '{}', 'dead', now() - make_interval(secs => g), 8, 8,
              CASE WHEN g %% 2 = 0 THEN 'ValueError' ELSE 'lease_expired' END, 'x'
         FROM generate_series(1, %(dead)s) AS g""",
    """INSERT INTO fairsched.attempt_log (job_id, attempt, lease_token, lease_owner, claimed_at, outcome)
       SELECT id, 1, 1, 'w1', now(), 'dead' FROM fairsched.jobs WHERE status = 'dead'""",
    """UPDATE fairsched.aggregates SET gap_since = now() - make_interval(secs => length(aggregate_key))
        WHERE queue_name = %(queue)s AND aggregate_key LIKE 'k1%%'""",
    """UPDATE fairsched.aggregates
          SET blocked_job_id = (SELECT min(id) FROM fairsched.jobs WHERE status = 'dead')
        WHERE queue_name = %(queue)s
          AND aggregate_key IN (SELECT 'k' || g FROM generate_series(0, 49) AS g)""",
)


@dataclass(frozen=True)
class Read:
    """One statement a page runs, its parameters, the indexes its plan must scan and the
    most shared buffers it may read."""

    query: str
    params: dict[str, Any]
    indexes: frozenset[str]
    max_buffers: int


DEAD_FILTERS = {"queue": None, "tenant": None, "code": None, "since": None, "limit": 50}

READS = {
    "web_aggregate_blocked": Read(
        "web_aggregate_blocked",
        {"queue": QUEUE, "tenant": "t1", "key": "k1"},
        frozenset({"aggregates_pkey"}),
        10,
    ),
    # At most 20 per queue, in gap_since order (over a thousand aggregates wait on a gap).
    "web_aggregates_gap": Read("web_aggregates_gap", {"shown": 20}, frozenset({"aggregates_gap_idx"}), 100),
    # The dead jobs page reads each queue apart (newest first, merged): never all dead jobs.
    "dead_list by queue": Read(
        "dead_list", {**DEAD_FILTERS, "queue": QUEUE}, frozenset({"jobs_dead_idx"}), 200
    ),
    "dead_list by queue and tenant": Read(
        "dead_list",
        {**DEAD_FILTERS, "queue": QUEUE, "tenant": "t7"},
        frozenset({"jobs_tenant_dead_idx"}),
        200,
    ),
    "dead_list by queue and code": Read(
        "dead_list", {**DEAD_FILTERS, "queue": QUEUE, "code": "ValueError"}, frozenset({"jobs_dead_idx"}), 300
    ),
    "job_get": Read("job_get", {"id": 500_000}, frozenset({"jobs_pkey"}), 10),
    "job_history": Read(
        "job_history", {"id": 500_000}, frozenset({"attempt_log_pkey", "job_events_job_idx"}), 20
    ),
    # The share rows with what each tenant released: O(tenants), a few buffers a tenant.
    "tenant_shares_list": Read("tenant_shares_list", {"queue": QUEUE}, frozenset(), 3 * TENANTS),
    "status_share_totals": Read("status_share_totals", {}, frozenset(), 2 * TENANTS),
}


@pytest.fixture(scope="module")
def backlog(server_dsn: str, large_backlog: str) -> Iterator[psycopg.Connection]:
    with database_copy(server_dsn, large_backlog) as dsn:
        with Client(dsn) as client:
            client.declare_queue("quiet", QueueSettings())
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in EXTRAS:
                conn.execute(statement, {"queue": QUEUE, "dead": DEAD})
            conn.execute("VACUUM ANALYZE fairsched.jobs")
            conn.execute("VACUUM ANALYZE fairsched.attempt_log")
            conn.execute("VACUUM ANALYZE fairsched.aggregates")
            conn.execute("SET jit = off")
            yield conn


@pytest.mark.slow
@pytest.mark.parametrize("name", list(READS))
def test_a_page_read_uses_its_index_at_1m_jobs_and_1k_tenants(name: str, backlog: psycopg.Connection) -> None:
    read = READS[name]
    plan = plan_of(backlog, QUERIES[read.query], read.params)
    print(f"{name}: {plan.shared_buffers} shared buffers, indexes {sorted(plan.index_names())}")
    assert not plan.seq_scans_over("jobs"), f"{name} scans fairsched.jobs sequentially"
    assert read.indexes <= plan.index_names(), f"{name}: {plan.index_names()}"
    assert plan.shared_buffers <= read.max_buffers, (
        f"{name} read {plan.shared_buffers} shared buffers (bound {read.max_buffers})"
    )


@pytest.mark.slow
def test_every_web_statement_is_planned() -> None:
    """A new statement in fairsched/db/sql/web.sql gets a plan test here."""
    assert {n for n in QUERIES if n.startswith("web_")} <= {r.query for r in READS.values()}
