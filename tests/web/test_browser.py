"""The dashboard in a real Chromium, against a real database and real worker processes.

Every page loads without console errors; the share chart and the counts move while
workers run; a weight changed in the page reaches ``fairsched tenant list`` and the
claims that follow; a dead job replayed from the page runs again, a blocked aggregate
skipped from it lets the next job run, jobs cancelled from it stop; starving and
throttled tenants are told apart.
Who may change what: test_access.py.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from datetime import datetime
from pathlib import Path

import psycopg
from playwright.sync_api import Page
from worker_support import FAIRSCHED, Workers, wait_for

from fairsched import JobSpec, QueueSettings
from web.web_support import QUEUE, WebServer, a_dead_job, declare, fill, log_in, status_of, web_server

CLAIMS_SINCE = """
SELECT tenant FROM (
    SELECT j.tenant, a.claimed_at AS at FROM fairsched.attempts a JOIN fairsched.jobs j ON j.id = a.job_id
    UNION ALL
    SELECT tenant, started_at FROM fairsched.jobs WHERE status IN ('running', 'succeeded')
) c
WHERE at >= %(since)s ORDER BY at LIMIT %(count)s
"""
"""The first claims made since a time, as the tenants they went to."""


def db_now(db: psycopg.Connection) -> datetime:
    row = db.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def claims_since(db: psycopg.Connection, since: datetime, count: int) -> Counter[str]:
    rows = wait_for(
        lambda: (
            len(found := db.execute(CLAIMS_SINCE, {"since": since, "count": count}).fetchall()) == count
            and found
        ),
        f"{count} claims",
    )
    return Counter(tenant for (tenant,) in rows)


def test_every_page_loads_without_console_errors(
    fresh_db: str, db: psycopg.Connection, workers: Workers, server: WebServer, page: Page
) -> None:
    from apps.probe import create_probe_tables

    create_probe_tables(db)
    with declare(fresh_db, policies=["weighted", "aging", "serial"]) as client:
        fill(client, "acme", 20)
        fill(client, "globex", 10)
        dead = a_dead_job(client, db, workers, aggregate_key="order-1", aggregate_seq=1)
        client.enqueue(QUEUE, {"sleep": 0}, tenant="acme", aggregate_key="order-1", aggregate_seq=2)
    log_in(page, server)
    paths = [
        "",
        f"queues/{QUEUE}",
        f"queues/{QUEUE}?sort=weight&dir=asc",
        "starvation",
        "aggregates",
        "dead",
        f"dead?queue={QUEUE}&tenant=acme&code=fairsched.errors.PermanentError",
        f"jobs/{dead}",
        f"actions/tenant?queue={QUEUE}&tenant=acme",
    ]
    for path in paths:
        response = page.goto(server.url + path)
        assert response is not None and response.status == 200, path
        page.wait_for_timeout(700)  # a live refresh or two, and the chart's first samples
    page.goto(server.url + "aggregates")
    assert page.locator("#blocked").get_by_text("order-1").count() == 1
    page.goto(f"{server.url}jobs/{dead}")
    assert "<str>" in page.inner_text("#payload")  # a redacted shape: "fail": "<str>"
    assert "permanent" not in page.inner_text("#payload")
    assert page.console.errors == []  # type: ignore[attr-defined]


def test_the_share_chart_and_the_counts_move_while_workers_run(
    fresh_db: str, workers: Workers, server: WebServer, page: Page
) -> None:
    with declare(fresh_db, policies=["weighted"]) as client:
        fill(client, "acme", 2000)
        fill(client, "globex", 2000)
        client.set_tenant_share(QUEUE, "acme", weight=3)
    log_in(page, server)
    page.goto(f"{server.url}queues/{QUEUE}")
    claimable = page.inner_text("[data-field=claimable]")
    workers.start({QUEUE: 4})
    wait_for(lambda: int(page.get_attribute("#share-chart", "data-samples") or 0) >= 4, "4 chart samples")
    wait_for(lambda: page.inner_text("[data-field=claimable]") != claimable, "the claimable count to change")
    observed = page.inner_text("#tenants tr[data-tenant=acme] td:nth-child(5)")
    wait_for(
        lambda: page.inner_text("#tenants tr[data-tenant=acme] td:nth-child(5)") != observed, "acme's share"
    )
    # the chart's series hold observed shares near the entitled 75% / 25%
    page.goto(server.url)
    row = f"tr[data-queue={QUEUE}]"
    wait_for(lambda: page.inner_text(f"{row} [data-field=workers]") == "1", "the worker in the registry")
    assert page.inner_text(f"{row} [data-field=slots]") == "4"
    wait_for(
        lambda: page.inner_text(f"tr[data-queue={QUEUE}] [data-field=claimed]") not in ("-", "0.0"), "a rate"
    )
    assert page.console.errors == []  # type: ignore[attr-defined]


def test_a_weight_change_in_the_page_reaches_tenant_list_and_the_next_claims(
    fresh_db: str, db: psycopg.Connection, workers: Workers, server: WebServer, page: Page
) -> None:
    with declare(fresh_db, policies=["weighted"]) as client:
        fill(client, "a", 3000)
        fill(client, "b", 3000)
    workers.start({QUEUE: 4})
    before = claims_since(db, db_now(db), 200)
    log_in(page, server)
    page.goto(f"{server.url}queues/{QUEUE}")
    page.click("#tenants tr[data-tenant=b] a:text('change')")
    page.fill("#weight", "4")
    page.click("#preview")
    changes = page.inner_text("#changes")
    assert "weight" in changes and "1" in changes and "4" in changes
    assert "web:token" in page.inner_text("main")
    changed = db_now(db)
    page.click("#confirm")
    assert "changed" in page.inner_text("#done")
    listed = subprocess.run(
        [str(FAIRSCHED), "tenant", "list", QUEUE, "--json"],
        env={"FAIRSCHED_DATABASE_URL": fresh_db, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    weights = {row["tenant"]: row["weight"] for row in json.loads(listed.stdout)}
    assert weights == {"a": 1.0, "b": 4.0}
    assert f"tenant {QUEUE}/b changed by web:token: weight 4, cap unchanged" in server.output()
    audit = db.execute("SELECT by, action, tenant, detail FROM fairsched.admin_events").fetchall()
    assert audit == [("web:token", "tenant_share", "b", {"weight": 4.0, "cap": None})]
    after = claims_since(db, changed, 300)
    share_b = after["b"] / sum(after.values())
    print(f"before {dict(before)}; after b=4: {dict(after)} (b {share_b:.3f})")
    assert abs(before["b"] / sum(before.values()) - 0.5) <= 0.08, before
    assert abs(share_b - 0.8) <= 0.08, after
    assert page.console.errors == []  # type: ignore[attr-defined]


def test_a_dead_job_replayed_from_the_page_runs_again(
    fresh_db: str, db: psycopg.Connection, workers: Workers, server: WebServer, page: Page
) -> None:
    from apps.probe import create_probe_tables

    create_probe_tables(db)
    with declare(fresh_db) as client:
        job_id = a_dead_job(client, db, workers)
    log_in(page, server)
    page.goto(f"{server.url}dead?queue={QUEUE}")
    page.locator(f"tr[data-job='{job_id}'] button:text('replay')").click()
    assert "dead" in page.inner_text("#changes") and "pending" in page.inner_text("#changes")
    assert status_of(db, job_id) == "dead"  # the preview changed nothing
    page.click("#confirm")
    assert "replayed" in page.inner_text("#done")
    workers.start({QUEUE: 1})
    starts = "SELECT count(*) FROM public.probe_events WHERE job_id = %s AND event = 'start'"
    wait_for(
        lambda: (db.execute(starts, (job_id,)).fetchone() or (0,))[0] == 2, "the replayed job to run again"
    )
    wait_for(lambda: status_of(db, job_id) == "dead", "the replayed run to end")
    page.goto(f"{server.url}jobs/{job_id}")
    events = page.inner_text("#events")
    assert "replayed" in events and "web:token" in events
    assert page.locator("#attempts tbody tr").count() == 2
    assert page.console.errors == []  # type: ignore[attr-defined]


def test_jobs_cancelled_from_the_page_a_queued_one_at_once_a_running_one_stopped(
    fresh_db: str, db: psycopg.Connection, workers: Workers, server: WebServer, page: Page
) -> None:
    with declare(fresh_db) as client:
        running, queued = client.enqueue_many(
            QUEUE, [JobSpec({"steps": 1200, "step_seconds": 0.05}, "acme"), JobSpec({}, "acme")]
        )
    workers.start({QUEUE: 1})
    wait_for(lambda: status_of(db, running) == "running", "the long job runs")
    log_in(page, server)
    for job_id, after, done in [
        (queued, "cancelled", "cancelled"),
        (running, "asked to stop", "asked to stop"),
    ]:
        page.goto(f"{server.url}jobs/{job_id}")
        page.locator("button:text('cancel')").click()
        assert after in page.inner_text("#changes")
        page.click("#confirm")
        assert done in page.inner_text("#done")
    wait_for(lambda: status_of(db, running) == "cancelled", "the running job stops, cancelled")
    assert status_of(db, queued) == "cancelled"
    page.goto(f"{server.url}jobs/{running}")
    events = page.inner_text("#events")
    assert "cancel_requested" in events and "web:token" in events
    assert page.locator("button:text('cancel')").count() == 0  # finished: no cancel offered
    assert page.console.errors == []  # type: ignore[attr-defined]


def test_a_blocked_aggregate_skipped_from_the_page_lets_the_next_job_run_and_gaps_are_listed(
    fresh_db: str, db: psycopg.Connection, workers: Workers, server: WebServer, page: Page
) -> None:
    from apps.probe import create_probe_tables

    create_probe_tables(db)
    with declare(fresh_db, policies=["serial"]) as client:
        head = a_dead_job(client, db, workers, aggregate_key="order-7", aggregate_seq=1)
        follower = client.enqueue(
            QUEUE, {"sleep": 0}, tenant="acme", aggregate_key="order-7", aggregate_seq=2
        )
        for seq in (1, 3):  # 2 is missing: after 1, order-9 waits on the gap
            client.enqueue(QUEUE, {"sleep": 0}, tenant="globex", aggregate_key="order-9", aggregate_seq=seq)
    log_in(page, server)
    page.goto(f"{server.url}aggregates")
    page.locator("#blocked tr", has_text="order-7").locator("button:text('skip')").click()
    assert f"dead head job {head}" in page.inner_text("#changes")
    page.click("#confirm")
    assert f"job {head} discarded" in page.inner_text("#done")
    workers.start({QUEUE: 1})
    wait_for(lambda: status_of(db, follower) == "succeeded", "the aggregate's next job to run")
    assert status_of(db, head) == "discarded"
    page.goto(f"{server.url}jobs/{head}")
    assert "web:token" in page.inner_text("#events")
    page.goto(f"{server.url}aggregates")
    wait_for(lambda: "order-9" in page.inner_text("#gaps"), "order-9 listed as waiting on a gap")
    assert "\t2\t" in page.inner_text("#gaps tbody tr")  # the missing number


def test_starving_tenants_and_throttled_ones_are_listed_apart(
    fresh_db: str, db: psycopg.Connection, workers: Workers, tmp_path: Path, page: Page
) -> None:
    with declare(fresh_db, policies=["weighted", "ratelimit"]) as client:
        client.declare_queue("idle", QueueSettings())
        client.enqueue_many("idle", [JobSpec({}, tenant="stuck") for _ in range(3)])
        client.set_tenant_rate(QUEUE, "slow", "1/h")
        fill(client, "slow", 3)
    workers.start({QUEUE: 1})
    claimed = "SELECT count(*) FROM fairsched.jobs WHERE tenant = 'slow' AND status = 'succeeded'"
    wait_for(lambda: (db.execute(claimed).fetchone() or (0,))[0] == 1, "slow's one job an hour")
    limits = {"FAIRSCHED_EXPORTER__STARVING_AFTER_SECONDS": "0.5"}
    with web_server(fresh_db, tmp_path, limits) as server:
        log_in(page, server)
        page.goto(f"{server.url}starvation")
        wait_for(lambda: "stuck" in page.inner_text("#starving"), "stuck listed as starving")
        assert "slow" not in page.inner_text("#starving")
        assert "slow" in page.inner_text("#throttled") and "stuck" not in page.inner_text("#throttled")
        page.goto(f"{server.url}queues/{QUEUE}")
        row = page.inner_text("#tenants tr[data-tenant=slow]")
        assert "throttled" in row and "1/h" in row
    assert page.console.errors == []  # type: ignore[attr-defined]
