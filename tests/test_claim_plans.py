"""The composed claim: a snapshot of every stack's rendered SQL, and its plan on a 10k and
a 1M-job backlog (1k tenants, 10k aggregates): the index it uses, no Sort over the
backlog, shared buffers per claim flat within 1.5x; the recovery sweep's bounded plan."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from fairsched import Client, QueueSettings
from fairsched.claim import compose_claim
from fairsched.claimbench import STACKS, backlog_build, claim_buffers, claim_explain
from fairsched.sql import QUERIES
from tests.conftest import with_database

SNAPSHOTS = Path(__file__).parent / "snapshots"

JOB_INDEX = {"fifo": "jobs_claimable_idx", "aging": "jobs_aging_idx"}
TENANT_JOB_INDEX = {"fifo": "jobs_tenant_fifo_idx", "aging": "jobs_tenant_aging_idx"}


def expected_indexes(names: tuple[str, ...]) -> set[str]:
    order = "aging" if "aging" in names else "fifo"
    if "weighted" in names:
        return {"tenant_shares_pass_idx", TENANT_JOB_INDEX[order]}
    return {JOB_INDEX[order]}


@pytest.mark.parametrize("names", STACKS, ids="+".join)
def test_rendered_claim_matches_its_snapshot(names: tuple[str, ...]) -> None:
    rendered = compose_claim(names).as_string(None) + "\n"
    path = SNAPSHOTS / f"claim-{'+'.join(names)}.sql"
    if os.environ.get("FAIRSCHED_UPDATE_SNAPSHOTS"):
        path.write_text(rendered)
    assert path.read_text() == rendered, f"{path.name} changed; review, then FAIRSCHED_UPDATE_SNAPSHOTS=1"


def test_the_composer_caches_per_stack() -> None:
    assert compose_claim(("weighted", "aging")) is compose_claim(("weighted", "aging"))
    assert compose_claim(("aging",)) is not compose_claim(("fifo",))


def _backlog(server_dsn: str, template_db: str, jobs: int) -> Iterator[psycopg.Connection]:
    name = f"fairsched_test_claim_plans_{jobs}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}")
        admin.execute(create.format(sql.Identifier(name), sql.Identifier(template_db)))
    dsn = with_database(server_dsn, name)
    try:
        with Client(dsn) as client:
            client.declare_queue("big", QueueSettings())
        with psycopg.connect(dsn, autocommit=True) as conn:
            backlog_build(conn, "big", jobs=jobs, tenants=1000, aggregates=10_000)
            yield conn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def small(server_dsn: str, template_db: str) -> Iterator[psycopg.Connection]:
    yield from _backlog(server_dsn, template_db, 10_000)


@pytest.fixture(scope="module")
def large(server_dsn: str, template_db: str) -> Iterator[psycopg.Connection]:
    yield from _backlog(server_dsn, template_db, 1_000_000)


@pytest.mark.slow
@pytest.mark.parametrize("limit", [1, 10])
@pytest.mark.parametrize("names", STACKS, ids="+".join)
def test_claim_plan_is_an_index_scan_with_flat_buffers(
    small: psycopg.Connection, large: psycopg.Connection, names: tuple[str, ...], limit: int
) -> None:
    for conn in (small, large):
        plan = claim_explain(conn, names, "big", limit=limit)
        assert plan.rows == limit
        assert expected_indexes(names) <= plan.index_names(), plan.index_names()
        assert not plan.sorts_over_jobs()
        assert not [n for n in plan.nodes() if n["Node Type"] == "Seq Scan" and n["Relation Name"] == "jobs"]
    at_10k = claim_buffers(small, names, "big", limit=limit)
    at_1m = claim_buffers(large, names, "big", limit=limit)
    assert at_1m <= 1.5 * at_10k, (at_10k, at_1m)


@pytest.mark.slow
def test_recovery_sweep_uses_the_expired_lease_index_in_bounded_batches(large: psycopg.Connection) -> None:
    statement = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}").format(
        sql.SQL(QUERIES["recovery_sweep"])
    )
    with large.transaction(force_rollback=True):
        row = large.execute(statement, {"batch": 100}).fetchone()
    assert row is not None
    plan = claim_plan_nodes(row[0][0]["Plan"])
    scans = [n for n in plan if n.get("Index Name") == "jobs_expired_lease_idx"]
    assert scans and all(n["Actual Rows"] <= 100 for n in scans)
    assert any(n["Node Type"] == "Limit" for n in plan)
    assert not [n for n in plan if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"]


def claim_plan_nodes(plan: dict[str, object]) -> list[dict[str, object]]:
    nodes, stack = [], [plan]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.get("Plans", []))  # type: ignore[arg-type]
    return nodes
