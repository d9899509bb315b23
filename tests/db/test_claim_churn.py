"""The claim under churn: after as many jobs were claimed and completed as the backlog
holds (refilled as it drains, no VACUUM), every stack's claim is still an index-ordered
scan that stops at its limit: the named index, no Sort over jobs, no Seq Scan on jobs;
and with the claim heads refreshed it reads no more shared buffers than on the fresh
backlog (1.5x at most), though every claim left dead entries at the head of its index."""

from __future__ import annotations

import psycopg
import pytest
from test_claim_plans import expected_indexes

from bench.claimbench import STACKS, claim_buffers_under_churn
from fairsched import Client, QueueSettings


@pytest.mark.parametrize("names", [("fifo",), ("weighted", "aging", "serial")], ids="+".join)
def test_claim_plan_stays_index_ordered_under_churn(fresh_db: str, names: tuple[str, ...]) -> None:
    assert names in STACKS
    with Client(fresh_db) as client:
        client.declare_queue("big", QueueSettings(notify=False))
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        # Heads refreshed before every churn step: the figure does not depend on timing.
        figure = claim_buffers_under_churn(
            conn, names, "big", backlog=5000, batch=250, limit=10, tenants=200, refresh_seconds=0
        )
        left = conn.execute("SELECT count(*) FROM fairsched.jobs WHERE status <> 'succeeded'").fetchone()
    assert figure.churned == 5000
    assert left is not None and left[0] == 5000, "the backlog was refilled as it drained"
    plan = figure.plan
    assert plan.rows == 10
    assert expected_indexes(names) <= plan.index_names(), plan.index_names()
    assert not plan.sorts_over_jobs()
    assert not plan.seq_scans_over()
    assert figure.churned_buffers <= 1.5 * figure.fresh_buffers, (
        figure.fresh_buffers,
        figure.churned_buffers,
    )
