"""Operator queries cost O(queues + tenants), never O(jobs) (DESIGN §9): the KEDA scaler's
query, every exporter statement (also read by ``status`` and ``top``), ``tenant show``'s and
``simulate --from-queue``'s, planned and run on a 100k and a 1M-job backlog. Each uses the
index it names, never a Seq Scan of fairsched.jobs, reads a bounded number of shared
buffers, and reads no more (within 1.5x) on the backlog ten times larger."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from backlog_support import LARGE_JOBS, QUEUE, TENANTS, backlog_fill
from database_support import database_copy
from fairsched_policies.ratelimit import THROTTLE

from bench.claimbench import ClaimPlan
from fairsched import Client, QueueSettings
from fairsched.db.sql import QUERIES
from fairsched.observe.snapshot import ExporterSettings
from fairsched.observe.status import BLOCKED_READ, BLOCKED_SHOWN
from fairsched.policy.owned import level_query, level_signature
from fairsched.simplan import MAX_JOBS

K8S = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"

KEDA_QUEUE = "emails"
"""The queue the KEDA ScaledObject's query names (the tests ask it of the backlog's)."""
WHALE = 12_000
"""Claimable jobs, and as many delayed ones, of tenant ``whale``: more than the count limit."""
DEAD = 12_000
RECENT_JOBS = 500
"""Jobs created after the backlog: the window ``simulate --from-queue`` replays."""

EXTRAS = (
    # Delayed work at a higher priority: it comes first in the queue's index order, so a
    # count that filters available_at instead of ranging over it reads all of it.
    """INSERT INTO fairsched.jobs (queue_name, tenant, payload, priority, available_at, max_attempts)
       SELECT %(queue)s, 't' || (g %% 100), '{}', 5, now() + interval '1 day', 8
         FROM generate_series(1, %(jobs)s / 10) AS g""",
    # Dead jobs of every tenant (more than the count limit at either size), and aggregates
    # blocked by some of them.
    """INSERT INTO fairsched.jobs (queue_name, tenant, payload, status, finished_at, attempt_count,
                                   max_attempts, last_error)
       SELECT %(queue)s, 't' || (g %% 1000), '{}', 'dead', now() - make_interval(secs => g), 8, 8, 'x'
         FROM generate_series(1, %(dead)s) AS g""",
    # A whale whose claimable and delayed jobs both pass the count limit at either size.
    """INSERT INTO fairsched.jobs (queue_name, tenant, payload, priority, available_at, max_attempts)
       SELECT %(queue)s, 'whale', '{}', g %% 3,
              CASE WHEN g %% 2 = 0 THEN now() + interval '1 day' ELSE now() - interval '1 hour' END, 8
         FROM generate_series(1, 2 * %(whale)s) AS g""",
    # Another queue whose backlog is nearly all delayed (scheduled work, a retry storm):
    # the KEDA query's count never reaches its cap there.
    """INSERT INTO fairsched.jobs (queue_name, tenant, payload, available_at, max_attempts)
       SELECT 'scheduled', 's' || (g %% 10), '{}',
              CASE WHEN g <= 100 THEN now() ELSE now() + interval '1 day' END, 8
         FROM generate_series(1, %(jobs)s / 10) AS g""",
    """UPDATE fairsched.aggregates
          SET blocked_job_id = (SELECT min(id) FROM fairsched.jobs WHERE status = 'dead')
        WHERE queue_name = %(queue)s
          AND aggregate_key IN (SELECT 'k' || g FROM generate_series(0, 49) AS g)""",
)
RECENT = """INSERT INTO fairsched.jobs (queue_name, tenant, payload, max_attempts)
            SELECT %(queue)s, 't' || (g %% 7), '{}', 8 FROM generate_series(1, %(count)s) AS g"""


@dataclass(frozen=True)
class Backlog:
    conn: psycopg.Connection
    since: datetime
    """Between the backlog's creation and the recent jobs'."""


def _backlog(dsn: str, jobs: int) -> Iterator[Backlog]:
    """The operator's additions to a backlog of ``jobs`` jobs (``backlog_fill``) in ``dsn``."""
    with Client(dsn) as client:
        client.declare_queue("quiet", QueueSettings())
        client.declare_queue("scheduled", QueueSettings())
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in EXTRAS:
            conn.execute(statement, {"queue": QUEUE, "jobs": jobs, "whale": WHALE, "dead": DEAD})
        since = _one(conn, "SELECT clock_timestamp()")
        conn.execute(RECENT, {"queue": QUEUE, "count": RECENT_JOBS})
        conn.execute("VACUUM ANALYZE fairsched.jobs")
        conn.execute("VACUUM ANALYZE fairsched.aggregates")
        conn.execute("SET jit = off")
        yield Backlog(conn, since)


def _one(conn: psycopg.Connection, query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


@pytest.fixture(scope="module")
def small(server_dsn: str, template_db: str) -> Iterator[Backlog]:
    with database_copy(server_dsn, template_db) as dsn:
        backlog_fill(dsn, 100_000)
        yield from _backlog(dsn, 100_000)


@pytest.fixture(scope="module")
def large(server_dsn: str, large_backlog: str) -> Iterator[Backlog]:
    with database_copy(server_dsn, large_backlog) as dsn:
        yield from _backlog(dsn, LARGE_JOBS)


def keda_query(queue: str = QUEUE) -> str:
    """The ScaledObject's query, on ``queue`` instead of the one it names."""
    documents = yaml.safe_load_all((K8S / "keda-scaledobject.yaml").read_text("utf-8"))
    scaled = next(d for d in documents if d["kind"] == "ScaledObject")
    query = str(scaled["spec"]["triggers"][0]["metadata"]["query"])
    assert f"'{KEDA_QUEUE}'" in query
    return query.replace(f"'{KEDA_QUEUE}'", f"'{queue}'")


LIMITS = ExporterSettings()
TENANT_LEVELS = TENANTS * 3 + 100 + 3 + 10
"""(tenant, priority level) pairs with pending work: 3 levels of every tenant, one delayed
level of 100 tenants, the whale's 3, and the 10 tenants of the scheduled queue."""


@dataclass(frozen=True)
class Operator:
    """One operator query: its text (named query or literal), the indexes its plan must
    scan, and the most shared buffers it may read on the 1M-job backlog."""

    query: str
    indexes: frozenset[str]
    max_buffers: int

    def text(self) -> str:
        if self.query.startswith("keda"):
            return keda_query("scheduled" if self.query == "keda_delayed_backlog" else QUEUE)
        if self.query == "exporter_tenant_throttled":  # as a scrape runs it for ratelimit
            return level_query(QUERIES[self.query], THROTTLE).as_string(None)
        return QUERIES[self.query]


OPERATORS = {
    "keda": Operator("keda", frozenset({"jobs_claimable_idx", "jobs_expired_lease_idx"}), 200),
    "keda_delayed_backlog": Operator(
        "keda_delayed_backlog", frozenset({"jobs_claimable_idx", "jobs_expired_lease_idx"}), 200
    ),
    "exporter_queue_levels": Operator("exporter_queue_levels", frozenset({"jobs_claimable_idx"}), 1_000),
    # One descent (index pages and one heap page) per (tenant, level).
    "exporter_tenant_oldest": Operator(
        "exporter_tenant_oldest", frozenset({"jobs_tenant_fifo_idx"}), 6 * TENANT_LEVELS
    ),
    "exporter_running": Operator("exporter_running", frozenset({"jobs_expired_lease_idx"}), 1_500),
    "exporter_dead": Operator("exporter_dead", frozenset({"jobs_dead_idx"}), 300),
    "exporter_aggregates": Operator(
        "exporter_aggregates", frozenset({"aggregates_blocked_idx", "aggregates_gap_idx"}), 100
    ),
    # Share rows only: 1k of them are read sequentially as readily as by index (O(tenants)).
    "exporter_active_weights": Operator("exporter_active_weights", frozenset(), 2_000),
    "exporter_tenant_shares": Operator("exporter_tenant_shares", frozenset(), 200),
    # Two primary-key lookups of fairsched.ratelimits per tenant with claimable work on a
    # ratelimit queue (none in this backlog): O(tenants).
    "exporter_tenant_throttled": Operator("exporter_tenant_throttled", frozenset(), 300),
    # The whale's claimable and delayed counts stop at the count limit: about two buffers
    # (an index entry and its heap row) per job counted.
    "status_tenant": Operator(
        "status_tenant",
        frozenset({"jobs_tenant_fifo_idx", "jobs_tenant_dead_idx", "jobs_aggregate_waiting_idx"}),
        5 * LIMITS.count_limit,
    ),
    "status_tenant_share": Operator("status_tenant_share", frozenset({"tenant_shares_pkey"}), 10),
    "status_blocked": Operator("status_blocked", frozenset({"aggregates_blocked_idx", "jobs_pkey"}), 500),
    # The bisection (~20 primary key descents at 1M ids), then each recent job and its
    # latest attempt.
    "simulate_history": Operator("simulate_history", frozenset({"jobs_pkey"}), 300 + 12 * RECENT_JOBS),
}


def params(backlog: Backlog) -> dict[str, Any]:
    """Every operator query's parameters, at the exporter's default limits."""
    return {
        "max_levels": LIMITS.max_priority_levels,
        "count_limit": LIMITS.count_limit,
        "max_tenant_levels": LIMITS.max_tenant_levels,
        "near_seconds": LIMITS.near_expiry_seconds,
        "queues": [QUEUE] * 20,
        "tenants": [f"t{i}" for i in range(20)],
        "queue": QUEUE,
        "tenant": "whale",
        "shown": BLOCKED_SHOWN,
        "read_limit": BLOCKED_READ,
        "since": backlog.since,
        "limit": MAX_JOBS,
        "policies": ["ratelimit"],
        "functions": [level_signature(THROTTLE)],
    }


def explain(backlog: Backlog, operator: Operator) -> ClaimPlan:
    return plan_of(backlog.conn, operator.text(), params(backlog))


def plan_of(conn: psycopg.Connection, query: str, values: dict[str, Any]) -> ClaimPlan:
    """EXPLAIN (ANALYZE, BUFFERS) of one run (after a first one warms the cache)."""
    statement = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query
    conn.execute(statement, values)
    row = conn.execute(statement, values).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return ClaimPlan(plan, plan.get("Actual Rows", 0), plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPERATORS))
def test_operator_query_uses_its_index_and_reads_as_much_at_1m_jobs_as_at_100k(
    name: str, small: Backlog, large: Backlog
) -> None:
    operator = OPERATORS[name]
    at_100k, at_1m = explain(small, operator), explain(large, operator)
    for plan in (at_100k, at_1m):
        assert not plan.seq_scans_over("jobs"), f"{name} scans fairsched.jobs sequentially"
        assert operator.indexes <= plan.index_names(), f"{name}: {plan.index_names()}"
    assert at_1m.shared_buffers <= operator.max_buffers, (
        f"{name} read {at_1m.shared_buffers} shared buffers at 1M jobs (bound {operator.max_buffers})"
    )
    assert at_1m.shared_buffers <= 1.5 * max(at_100k.shared_buffers, 20), (
        f"{name}: {at_100k.shared_buffers} shared buffers at 100k jobs, {at_1m.shared_buffers} at 1M"
    )


@pytest.mark.slow
def test_every_operator_query_is_covered() -> None:
    """A new exporter, status or simulate statement gets a plan test here."""
    planned = {n for n in QUERIES if n.startswith(("exporter_", "status_", "simulate_history"))}
    not_planned = {
        "exporter_now",
        "exporter_transaction_setup",
        "exporter_transaction_limits",
        "status_queues",  # the queues table
        "exporter_throttle_queues",  # the queues table
        "status_share_totals",  # one pass over tenant_shares: O(tenants)
    }
    assert planned - not_planned == {n for n in OPERATORS if not n.startswith("keda")}


@pytest.mark.slow
def test_the_keda_count_and_simulate_window_are_right_on_the_large_backlog(large: Backlog) -> None:
    """The bounded queries still answer right: the KEDA value saturates at its caps, and
    the simulated window holds exactly the jobs created since ``since``."""
    (value,) = large.conn.execute(keda_query()).fetchone() or (None,)
    assert value == 2000 + 1000  # claimable capped at 2000, plus the 1000 running jobs
    (value,) = large.conn.execute(keda_query("scheduled")).fetchone() or (None,)
    assert value == 100
    rows = large.conn.execute(QUERIES["simulate_history"], params(large)).fetchall()
    assert len(rows) == RECENT_JOBS
    assert {r[1] for r in rows} == {f"t{i}" for i in range(7)}
