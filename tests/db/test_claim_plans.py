"""The composed claim: a snapshot of every stack's rendered SQL, and its plan on a 10k and
a 1M-job backlog (1k tenants, 10k aggregates): the index it uses, no Sort over the
backlog, shared buffers per claim flat within 1.5x; the recovery sweep's bounded plan;
the fenced transitions' lookups by id."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from backlog_support import QUEUE, backlog_fill
from database_support import database_copy
from psycopg import sql
from worker_support import wait_for

from bench.claimbench import (
    STACKS,
    ClaimPlan,
    backlog_build,
    claim_buffers,
    claim_explain,
    claim_session,
    queue_policies_set,
)
from fairsched import Client, QueueSettings
from fairsched.db.sql import QUERIES
from fairsched.engine.claim import (
    claim_params,
    claim_session_configure,
    jobs_claim,
    tenant_first,
)
from fairsched.engine.claimheads import statistics_refresh
from fairsched.engine.composer import compose_claim
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import (
    Failure,
    FailureKind,
    Lease,
    lease_release,
    lease_renew,
    leases_complete,
    leases_fail,
)
from fairsched.settings import Settings
from fairsched.worker.headkeeper import HeadKeeper

SNAPSHOTS = Path(__file__).resolve().parent.parent / "snapshots"

JOB_INDEX = {"fifo": "jobs_claimable_idx", "aging": "jobs_aging_idx"}
TENANT_JOB_INDEX = {"fifo": "jobs_tenant_fifo_idx", "aging": "jobs_tenant_aging_idx"}


def expected_indexes(names: tuple[str, ...]) -> set[str]:
    order = "aging" if "aging" in names else "fifo"
    if "weighted" in names:
        return {"tenant_shares_pass_idx", TENANT_JOB_INDEX[order]}
    return {JOB_INDEX[order]}


SHAPES = [(names, False) for names in STACKS] + [(names, True) for names in STACKS if tenant_first(names)]
"""Every stack's claim statement, and the single-job shape of the tenant-first ones."""


ADMITTED_SHAPES = [
    (("ratelimit",), False),
    (("weighted", "ratelimit"), False),
    (("weighted", "ratelimit"), True),
]
"""Stacks with an admission (the lab's claim scenario does not run them), for their snapshots."""


@pytest.mark.parametrize(
    ("names", "single"),
    SHAPES + ADMITTED_SHAPES,
    ids=["+".join(n) + "-single" * s for n, s in SHAPES + ADMITTED_SHAPES],
)
def test_rendered_claim_matches_its_snapshot(names: tuple[str, ...], single: bool) -> None:
    rendered = compose_claim(names, single=single).as_string(None) + "\n"
    path = SNAPSHOTS / f"claim-{'+'.join(names)}{'-single' if single else ''}.sql"
    if os.environ.get("FAIRSCHED_UPDATE_SNAPSHOTS"):
        path.write_text(rendered)
    assert path.read_text() == rendered, f"{path.name} changed; review, then FAIRSCHED_UPDATE_SNAPSHOTS=1"


def test_the_composer_caches_per_stack() -> None:
    assert compose_claim(("weighted", "aging")) is compose_claim(("weighted", "aging"))
    assert compose_claim(("aging",)) is not compose_claim(("fifo",))


@pytest.mark.parametrize("names", [names for names in STACKS if tenant_first(names)], ids="+".join)
def test_a_claim_of_one_takes_the_job_the_general_statement_takes(
    fresh_db: str, names: tuple[str, ...]
) -> None:
    """Claim after claim, over weights, caps, completions and a tenant running dry, the
    single-job shape leases the job the general statement would at ``limit`` 1."""
    with Client(fresh_db) as client:
        client.declare_queue("one", QueueSettings(policies=list(names), tenant_cap=3))
        for tenant, weight in (("a", 1.0), ("b", 2.0), ("c", 5.0)):
            client.set_tenant_share("one", tenant, weight=weight)
        specs = [JobSpec({}, tenant, priority=n % 3) for n in range(20) for tenant in ("a", "b", "c")]
        client.enqueue_many("one", [*specs, JobSpec({}, "d")])
    params = claim_params("one", owner="t", limit=1, lease_seconds=None)
    running: list[Lease] = []
    taken = []
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        for step in range(45):
            picks = []
            for single in (True, False):
                with conn.transaction(force_rollback=True), conn.cursor() as cur:
                    rows = cur.execute(compose_claim(names, single=single), params).fetchall()
                    picks.append([row[0] for row in rows])
            assert picks[0] == picks[1], step
            leases = jobs_claim(conn, "one", owner="t", limit=1)
            assert not picks[0] or [lease.id for lease in leases] == picks[0], step
            running += leases
            taken += [lease.tenant for lease in leases]
            if step % 2:
                leases_complete(conn, running[:1])
                running = running[1:]
    assert set(taken) == {"a", "b", "c", "d"} and taken.count("c") > taken.count("b") > taken.count("a")


def _backlog(dsn: str) -> Iterator[psycopg.Connection]:
    """A connection to the backlog in ``dsn`` (``backlog_support``: queue "big", which the
    tests name), its queue on the default stack."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        queue_policies_set(conn, QUEUE, QueueSettings().policies)
        yield conn


@pytest.fixture(scope="module")
def small(server_dsn: str, template_db: str) -> Iterator[psycopg.Connection]:
    with database_copy(server_dsn, template_db) as dsn:
        backlog_fill(dsn, 10_000)
        yield from _backlog(dsn)


@pytest.fixture(scope="module")
def large(server_dsn: str, large_backlog: str) -> Iterator[psycopg.Connection]:
    with database_copy(server_dsn, large_backlog) as dsn:
        yield from _backlog(dsn)


def assert_index_ordered(plan: ClaimPlan, names: tuple[str, ...], limit: int) -> None:
    """A claim of ``limit`` jobs through the stack's indexes, with no Sort or Seq Scan over
    jobs and no Seq Scan over the share rows."""
    assert plan.rows == limit
    assert expected_indexes(names) <= plan.index_names(), plan.index_names()
    assert not plan.sorts_over_jobs()
    assert not plan.seq_scans_over("jobs")
    assert not plan.seq_scans_over("tenant_shares")


@pytest.mark.slow
@pytest.mark.parametrize("limit", [1, 10])
@pytest.mark.parametrize("names", STACKS, ids="+".join)
def test_claim_plan_is_an_index_scan_with_flat_buffers(
    small: psycopg.Connection, large: psycopg.Connection, names: tuple[str, ...], limit: int
) -> None:
    for conn in (small, large):
        assert_index_ordered(claim_explain(conn, names, "big", limit=limit), names, limit)
    at_10k = claim_buffers(small, names, "big", limit=limit)
    at_1m = claim_buffers(large, names, "big", limit=limit)
    assert at_1m <= 1.5 * at_10k, (at_10k, at_1m)


@pytest.mark.slow
def test_recovery_sweep_uses_the_expired_lease_index_in_bounded_batches(large: psycopg.Connection) -> None:
    with psycopg.connect(large.info.dsn, autocommit=True) as conn:
        reports = auto_explained(conn)
        with conn.transaction(force_rollback=True):
            conn.execute(QUERIES["recovery_sweep"], {"batch": 100, "queue": None})
    [sweep] = [p for p in reported_plans(reports) if p["Query Text"].startswith("WITH expired AS")]
    plan = ClaimPlan(sweep["Plan"], 0, 0)
    scans = [n for n in plan.nodes() if n.get("Index Name") == "jobs_expired_lease_idx"]
    assert scans and all(n["Actual Rows"] <= 100 for n in scans)
    assert any(n["Node Type"] == "Limit" for n in plan.nodes())
    assert not plan.seq_scans_over()


@pytest.mark.parametrize(("threshold", "claim_mode"), [(5, "force_generic_plan"), (None, "auto")])
def test_claims_run_on_claim_sessions_unless_prepared_statements_are_off(
    fresh_db: str, threshold: int | None, claim_mode: str
) -> None:
    with Client(fresh_db, settings=Settings(prepare_threshold=threshold)) as client:
        client.declare_queue("plans", QueueSettings(policies=["weighted"]))
        client.enqueue("plans", {}, tenant="a")
        assert len(client.claim("plans", owner="w")) == 1
        with client.pool.connection() as conn:
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
            server_jit = conn.execute("SHOW jit").fetchone()
        with client.claim_pool.connection() as conn:
            assert conn.execute("SHOW plan_cache_mode").fetchone() == (claim_mode,)
            assert conn.execute("SHOW jit").fetchone() == (("off",) if threshold else server_jit)


AUTO_EXPLAIN = (
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_buffers = on",
    "SET auto_explain.log_format = json",
    "SET auto_explain.log_level = notice",
    "SET auto_explain.log_nested_statements = on",
)
"""auto_explain reports every plan a session executes to its client (tests run as superuser),
the statements of the functions it calls included (claims and transitions run in functions:
migrations/008_roles.sql)."""


def auto_explained(conn: psycopg.Connection) -> list[str]:
    """Turn auto_explain on for ``conn``; the returned list collects its reports."""
    reports: list[str] = []
    conn.add_notice_handler(lambda diag: reports.append(diag.message_primary or ""))
    for statement in AUTO_EXPLAIN:
        conn.execute(statement)
    return reports


def reported_plans(reports: list[str]) -> list[dict[str, Any]]:
    """The plans (EXPLAIN JSON, with their query text) among auto_explain's reports."""
    return [json.loads(r.split("plan:", 1)[1]) for r in reports if "plan:" in r]


def generic(plan: dict[str, Any]) -> bool:
    """Whether a claim's plan is its generic plan: it reads the queue from the claim
    function's parameter, where a custom plan holds the value."""
    return "$1" in json.dumps(plan["Plan"])


def session_claim_plans(
    dsn: str, names: tuple[str, ...], limit: int, runs: int = 8, queue: str = "big"
) -> list[ClaimPlan]:
    """The plans a claim session executed for ``runs`` rolled-back claims of ``names`` on
    ``queue`` (as auto_explain reports them, inside the stack's claim function), after
    checking they ran on the generic plan."""
    with claim_session(dsn) as conn:
        queue_policies_set(conn, queue, names)
        reports = auto_explained(conn)
        with conn.transaction(force_rollback=True):
            for _ in range(runs):
                assert len(jobs_claim(conn, queue, owner="plans", limit=limit)) == limit
            conn.execute("SET LOCAL auto_explain.log_min_duration = -1")
    plans = reported_plans(reports)
    claims = [p for p in plans if p["Query Text"].startswith("WITH q AS")]
    assert len(claims) >= runs, [p["Query Text"][:40] for p in plans]
    assert all(generic(p) for p in claims)
    return [ClaimPlan(p["Plan"], p["Plan"].get("Actual Rows", 0), 0) for p in claims]


@pytest.mark.parametrize(
    ("names", "session"),
    [(("fifo",), True), (("weighted", "aging", "serial"), True), (("weighted", "aging", "serial"), False)],
    ids=["fifo-claim-session", "composed-claim-session", "composed-other-connection"],
)
def test_claims_on_generic_plans_never_jit_compile(
    fresh_db: str, names: tuple[str, ...], session: bool
) -> None:
    """With ``jit_above_cost`` at 0 the server compiles every plan it runs: a claim
    session's claims, and a tenant-first claim on any connection (the statements that run
    on generic plans, whose cost estimates grow with the backlog), run without JIT."""
    with Client(fresh_db) as client:
        client.declare_queue("jit", QueueSettings(policies=list(names)))
        client.enqueue_many("jit", [JobSpec({}, f"t{n % 3}") for n in range(30)])
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        row = conn.execute("SELECT pg_jit_available()").fetchone()
        if not (row and row[0]):
            pytest.skip("this server was built without JIT")
        conn.execute("SET jit_above_cost = 0")
        reports = auto_explained(conn)
        assert conn.execute("SELECT count(*) FROM fairsched.jobs").fetchone() == (30,)
        if session:
            claim_session_configure(conn)
        for _ in range(8):
            assert len(jobs_claim(conn, "jit", owner="w", limit=2)) == 2
    plans = reported_plans(reports)
    control = [p for p in plans if p["Query Text"].startswith("SELECT count(*)")]
    claims = [p for p in plans if p["Query Text"].startswith("WITH q AS")]
    assert control and "JIT" in control[0]
    assert len(claims) == 8 and not [p["JIT"] for p in claims if "JIT" in p]


@pytest.mark.slow
@pytest.mark.parametrize("limit", [1, 10])
@pytest.mark.parametrize("names", STACKS, ids="+".join)
def test_a_claim_session_runs_the_index_ordered_generic_plan(
    small: psycopg.Connection, large: psycopg.Connection, names: tuple[str, ...], limit: int
) -> None:
    for conn in (small, large):
        for plan in session_claim_plans(conn.info.dsn, names, limit):
            assert_index_ordered(plan, names, limit)


PENDING_FILL = """INSERT INTO fairsched.jobs (queue_name, tenant, payload, max_attempts)
SELECT 'big', 't' || (g %% 10), '{}', 3 FROM generate_series(1, %(jobs)s) AS g"""

STATUS_STATISTICS = """SELECT count(*) FROM pg_stats
 WHERE schemaname = 'fairsched' AND tablename = 'jobs' AND attname = 'status'"""


def test_statistics_that_hide_a_backlog_are_refreshed_before_claims_sort_it(fresh_db: str) -> None:
    """With no statistics (the jobs table never analyzed) the planner guesses the pending
    jobs from the table's size, and at some sizes takes them for one row: a fifo claim
    session's generic plan then sorts the queue's pending jobs. ``statistics_refresh``
    analyzes the table once the hidden backlog reaches its minimum, and the claims read
    the jobs in index order again."""
    with Client(fresh_db) as client:
        client.declare_queue("big", QueueSettings())
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(PENDING_FILL, {"jobs": 40_000})  # a size whose page-based guess is ~1 row
        assert conn.execute(STATUS_STATISTICS).fetchone() == (0,)
        assert all(p.sorts_over_jobs() for p in session_claim_plans(fresh_db, ("fifo",), 10)), "the premise"
        assert not statistics_refresh(conn, min_pending=100_000), "below the minimum: left to autovacuum"
        assert statistics_refresh(conn)
        assert conn.execute(STATUS_STATISTICS).fetchone() == (1,)
        for plan in session_claim_plans(fresh_db, ("fifo",), 10):
            assert_index_ordered(plan, ("fifo",), 10)
        assert not statistics_refresh(conn), "the statistics know the backlog: nothing to do"


ID_HISTOGRAM_BOUNDS = """SELECT array_length(histogram_bounds::text::text[], 1) FROM pg_stats
 WHERE schemaname = 'fairsched' AND tablename = 'jobs' AND attname = 'id'"""

ANALYZE_COUNT = "SELECT analyze_count FROM pg_stat_user_tables WHERE relid = 'fairsched.jobs'::regclass"


def test_workers_started_together_analyze_a_hidden_backlog_once_on_a_small_sample(fresh_db: str) -> None:
    """Every worker's head keeper checks the statistics when it starts: of refreshes that
    find the same hidden backlog at once, one analyzes (the others take ANALYZE's lock
    after it and find the backlog known), and it samples at statistics target 10."""
    with Client(fresh_db) as client:
        client.declare_queue("big", QueueSettings())
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("ALTER TABLE fairsched.jobs SET (autovacuum_enabled = false)")  # its lock or its ANALYZE
        conn.execute(PENDING_FILL, {"jobs": 40_000})
        before = conn.execute(ANALYZE_COUNT).fetchone()
        barrier = threading.Barrier(6)

        def refresh(_: int) -> bool:
            with psycopg.connect(fresh_db, autocommit=True) as own:
                barrier.wait()
                return statistics_refresh(own)

        with ThreadPoolExecutor(6) as pool:
            ran = list(pool.map(refresh, range(6)))
        assert sum(ran) == 1, ran
        conn.execute("SELECT pg_stat_clear_snapshot()")
        after = conn.execute(ANALYZE_COUNT).fetchone()
        assert before is not None and after == (before[0] + 1,)
        bounds = conn.execute(ID_HISTOGRAM_BOUNDS).fetchone()
        assert bounds is not None and 2 <= bounds[0] <= 11, "a histogram of at most 10 buckets"


def test_the_head_keeper_refreshes_statistics_when_it_starts(fresh_db: str) -> None:
    with Client(fresh_db) as client:
        client.declare_queue("big", QueueSettings())
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute(PENDING_FILL, {"jobs": 1500})
        keeper = HeadKeeper(client, 0.01)
        keeper.start()
        try:
            with psycopg.connect(fresh_db, autocommit=True) as conn:
                wait_for(
                    lambda: conn.execute(STATUS_STATISTICS).fetchone() == (1,), "the jobs table analyzed"
                )
        finally:
            keeper.stop()


TENANT_FIRST_STACKS = [names for names in STACKS if tenant_first(names)]


@pytest.mark.parametrize("queue", ["bench", "big", "queue"])
@pytest.mark.parametrize("names", TENANT_FIRST_STACKS, ids="+".join)
def test_a_tenant_first_claim_scans_its_tenants_own_jobs_when_analyze_saw_one_tenant(
    fresh_db: str, names: tuple[str, ...], queue: str
) -> None:
    """A flood queued first, analyzed before anyone else queued: ANALYZE counts one tenant.
    The claim's generic plan, which cannot see the tenant, must still scan each tenant's
    jobs through the tenant's own index (the tenant column's n_distinct); through the queue-wide index
    every other tenant's scan walks the whole flood first, on every claim. Counting one
    tenant, the planner costs the two indexes within a hair of each other, and trivia
    decide (of these queues, only "big" got the tenant's index)."""
    order = "aging" if "aging" in names else "fifo"
    with Client(fresh_db) as client:
        client.declare_queue(queue, QueueSettings())
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            backlog_build(conn, queue, jobs=20_000, tenants=1, aggregates=1000)
            client.enqueue_many(queue, [JobSpec({}, f"small{n % 5}") for n in range(100)])
            for plan in session_claim_plans(fresh_db, names, 4, queue=queue):
                used = plan.index_names()
                assert TENANT_JOB_INDEX[order] in used and JOB_INDEX[order] not in used, used
            flood_only = claim_buffers(conn, names, queue, limit=4)
            conn.execute("ANALYZE fairsched.jobs")  # now it samples every tenant
            every_tenant = claim_buffers(conn, names, queue, limit=4)
    assert flood_only <= 1.5 * every_tenant, (flood_only, every_tenant)


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_fenced_transitions_look_their_jobs_up_by_id_whatever_analyze_saw(client: Client, mode: str) -> None:
    """Heartbeat, completion, failure and release probe ``jobs_pkey``, on generic plans
    and on custom plans of a large batch, even where the last ANALYZE saw no running
    job (a backlog analyzed before the workers started): a plan through
    ``jobs_expired_lease_idx`` or a Seq Scan of jobs reads every running job per call."""
    client.declare_queue("fence", QueueSettings())
    client.enqueue_many("fence", [JobSpec({}, "t") for _ in range(5000)])
    with client.pool.connection() as conn:
        conn.execute("ANALYZE fairsched.jobs")
    renewed, failed, released, *completed = client.claim("fence", owner="w", limit=303)
    with psycopg.connect(client.dsn, autocommit=True, prepare_threshold=0) as conn:
        reports = auto_explained(conn)
        conn.execute(sql.SQL("SET plan_cache_mode = {}").format(sql.Identifier(mode)))
        assert lease_renew(conn, renewed, progress=1) is not None
        assert leases_complete(conn, completed) == {lease.id for lease in completed}
        failure = Failure(failed, FailureKind.RETRYABLE, "boom", "boom")
        assert leases_fail(conn, [failure])[failed.id].held
        assert lease_release(conn, released)
        conn.execute("SET auto_explain.log_min_duration = -1")
    ran = reported_plans(reports)
    # The statements of lease_renew, leases_complete, leases_fail and lease_release
    # (migrations/008_roles.sql), by their first line.
    firsts = {"UPDATE fairsched.jobs AS j", "WITH done AS (", "WITH target AS (", "WITH moved AS ("}
    plans = [ClaimPlan(p["Plan"], 0, 0) for p in ran if p["Query Text"].splitlines()[0] in firsts]
    assert len(plans) == len(firsts), [p["Query Text"][:40] for p in ran]
    for plan in plans:
        assert "jobs_pkey" in plan.index_names(), plan.index_names()
        assert "jobs_expired_lease_idx" not in plan.index_names(), plan.index_names()
        assert not plan.seq_scans_over()


def _cte_plan(plan: ClaimPlan, cte: str) -> ClaimPlan:
    """The part of a claim's plan under CTE ``cte``."""
    (top,) = [n for n in plan.nodes() if n.get("Subplan Name") == f"CTE {cte}"]
    return ClaimPlan(top, 0, 0)


def _share_row_scans(plan: ClaimPlan, cte: str) -> list[dict[str, Any]]:
    """The index scans of share rows under CTE ``cte`` of a claim's plan."""
    return [
        n
        for n in _cte_plan(plan, cte).nodes()
        if n["Node Type"] == "Index Scan" and n["Relation Name"] == "tenant_shares"
    ]


@pytest.mark.parametrize("capped", [False, True], ids=["uncapped", "capped"])
def test_a_weighted_claim_charges_last_unless_the_queue_has_caps(fresh_db: str, capped: bool) -> None:
    """Without caps the jobs move first and the share rows are charged last, one tenant
    after the other in tenant order; with a cap anywhere on the queue, the share rows are
    locked and charged (cap checked) before the jobs move."""
    names = ("weighted", "aging", "serial")
    with Client(fresh_db) as client:
        client.declare_queue("w", QueueSettings(policies=list(names)))
        client.enqueue_many("w", [JobSpec({}, tenant) for tenant in "cba" * 5])
        if capped:
            client.set_tenant_share("w", "b", cap=2)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        plan = claim_explain(conn, names, "w", limit=9)
    assert plan.rows == 9
    first = [n["Actual Loops"] for cte in ("locked", "charged") for n in _share_row_scans(plan, cte)]
    last = [n["Actual Loops"] for n in _share_row_scans(plan, "charged_last")]
    assert (first, last) == (([3, 3], [0]) if capped else ([0, 0], [3])), (first, last)
    sorts = [n for n in _cte_plan(plan, "charged_last").nodes() if n["Node Type"] == "Sort"]
    moved_sorted = [n["Sort Key"] for n in sorts if n["Plans"][0].get("CTE Name") == "moved"]
    assert len(moved_sorted) == 1 and moved_sorted[0][0].endswith(".tenant"), sorts
