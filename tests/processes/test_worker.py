"""The worker runtime: its entry points, and real worker processes doing their job."""

from __future__ import annotations

import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from apps.probe import create_probe_tables
from worker_support import Workers, job_row, running_workers, statuses, wait_for, wait_listening

from fairsched import Client, JobSpec, QueueSettings, Settings
from fairsched.engine.lease import Lease
from fairsched.errors import ConfigError, InvalidInput, LeaseLost
from fairsched.worker.app import App, Job
from fairsched.worker.process import load_app, parse_queue_slots


def declare(client: Client, queue: str = "probe", *, lease: float = 5, **settings: Any) -> None:
    values: dict[str, Any] = {"backoff_base_seconds": 0.0, "backoff_max_seconds": 0.0, **settings}
    client.declare_queue(queue, QueueSettings(lease_seconds=lease, **values))


@pytest.fixture
def client(fresh_db: str, db: psycopg.Connection) -> Iterator[Client]:
    create_probe_tables(db)
    with Client(fresh_db, settings=Settings()) as c:
        yield c


def probe_events(db: psycopg.Connection, job_id: int) -> list[tuple[int, str]]:
    rows = db.execute(
        "SELECT attempt, event FROM public.probe_events WHERE job_id = %s ORDER BY id", (job_id,)
    ).fetchall()
    return [(attempt, name) for attempt, name in rows]


def attempt_outcomes(db: psycopg.Connection, job_id: int) -> list[str]:
    rows = db.execute(
        "SELECT outcome FROM fairsched.attempts WHERE job_id = %s ORDER BY lease_token", (job_id,)
    ).fetchall()
    return [row[0] for row in rows]


# -- entry points --------------------------------------------------------------


def test_load_app_finds_the_app() -> None:
    app = load_app("apps.probe:app")
    assert set(app.queues) == {"probe", "aprobe"}
    assert app.is_async("aprobe") and not app.is_async("probe")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("apps.probe", "expected module:attribute"),
        (":app", "expected module:attribute"),
        ("apps.nosuchmodule:app", "cannot import 'apps.nosuchmodule'"),
        ("apps.probe:nothing", "apps.probe.nothing is missing, not a fairsched App"),
        ("apps.probe:event", "is a function, not a fairsched App"),
    ],
)
def test_load_app_rejects_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_app(spec)


def test_load_app_imports_from_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd_jobs_module.py").write_text(
        "from fairsched.worker.app import App\napp = App()\napp.handler('emails')(print)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load_app("cwd_jobs_module:app").queues == ["emails"]


def test_parse_queue_slots() -> None:
    assert parse_queue_slots(["emails=8", "reports=2"]) == {"emails": 8, "reports": 2}


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["emails"], "expected queue=slots"),
        (["emails=0"], "slots must be a whole number"),
        (["emails=-1"], "slots must be a whole number"),
        (["emails=two"], "slots must be a whole number"),
        (["emails=1001"], "slots must be a whole number"),
        (["bad name=1"], "invalid queue name"),
        (["emails=1", "emails=2"], "given twice"),
        ([], "at least one --queue"),
    ],
)
def test_parse_queue_slots_rejects_bad_values(items: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_queue_slots(items)


def test_app_handlers_are_one_per_queue() -> None:
    app = App()

    @app.handler("emails")
    def send(job: Job) -> None:
        del job

    with pytest.raises(ConfigError, match="already has a handler"):
        app.handler("emails")(send)
    with pytest.raises(ConfigError, match="no handler for queue 'reports'"):
        app.handler_for("reports")
    with pytest.raises(InvalidInput):
        app.handler("no spaces allowed")


def _lease(seconds: float) -> Lease:
    now = datetime.now(UTC)
    return Lease(
        id=7, queue="q", token=1, owner="w", expires_at=now + timedelta(seconds=seconds), tenant="t",
        payload={"a": 1}, attempt=1, max_attempts=3, idempotency_key="k-7", priority=0,
        aggregate_key=None, aggregate_seq=None, created_at=now, started_at=now, lease_seconds=seconds,
    )  # fmt: skip


def test_job_reports_progress_and_sees_its_lease_lost() -> None:
    job = Job(_lease(30), claimed_local=0.0)
    assert job.lost, "30 s after a claim made at monotonic 0, the lease has surely expired"
    with pytest.raises(LeaseLost):
        job.progress(1)

    fresh = Job(_lease(30), claimed_local=time.monotonic())
    assert (fresh.id, fresh.tenant, fresh.payload, fresh.idempotency_key) == (7, "t", {"a": 1}, "k-7")
    assert not fresh.lost
    fresh.progress({"rows": 10})
    with pytest.raises(InvalidInput, match="JSON"):
        fresh.progress(object())
    fresh.mark_lost()
    assert fresh.lost
    with pytest.raises(LeaseLost):
        fresh.progress(2)


# -- real worker processes ------------------------------------------------------


def test_worker_drains_jobs_and_exits_zero_on_sigterm(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client)
    w = workers.start({"probe": 8})
    wait_listening(db, 1)
    client.enqueue_many("probe", [JobSpec({}, f"t{i % 3}") for i in range(500)])
    wait_for(lambda: statuses(db) == {"succeeded": 500}, "500 jobs succeeded")
    assert w.stop() == 0
    assert db.execute("SELECT count(*) FROM fairsched.attempts WHERE outcome = 'succeeded'").fetchone() == (
        500,
    )


def test_permanent_error_is_dead_at_once(client: Client, db: psycopg.Connection, workers: Workers) -> None:
    declare(client, max_attempts=5)
    job_id = client.enqueue("probe", {"fail": "permanent"}, tenant="t")
    workers.start({"probe": 1})
    wait_for(lambda: job_row(db, job_id)["status"] == "dead", "the job is dead")
    row = job_row(db, job_id)
    assert (row["attempt_count"], row["last_error_code"]) == (1, "fairsched.errors.PermanentError")
    assert attempt_outcomes(db, job_id) == ["dead"]


def test_fast_failing_handlers_have_every_failure_recorded_in_time(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=2, max_attempts=3)
    client.enqueue_many("probe", [JobSpec({"fail": "retryable"}, tenant="t") for _ in range(1000)])
    workers.start({"probe": 16})
    wait_for(lambda: statuses(db).get("dead") == 1000, "every job dead", timeout=120)
    outcomes = dict(db.execute("SELECT outcome, count(*) FROM fairsched.attempts GROUP BY 1").fetchall())
    assert outcomes == {"retrying": 2000, "dead": 1000}, "failures recorded as failures, none expired"


def completion_rounds(db: psycopg.Connection) -> tuple[int, float]:
    """Completion statements so far and the seconds between the first and the last (a
    round's jobs share its owner and finish time)."""
    row = db.execute(
        "SELECT count(DISTINCT (lease_owner, finished_at)),"
        " extract(epoch FROM max(finished_at) - min(finished_at))"
        " FROM fairsched.jobs WHERE status = 'succeeded'"
    ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def test_finished_attempts_are_recorded_at_most_once_per_window(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    """200 jobs of 10 ms on 8 slots finish over ~0.3 s, a few at a time: recorded as they
    come, that is ~100 completion statements; with a 0.5 s window, one per window. A job
    that finishes after a quiet window is recorded at once, not a window later."""
    window = 0.5
    declare(client, lease=30)
    workers.start({"probe": 8}, settings={"FAIRSCHED_COMPLETION_WINDOW_SECONDS": str(window)})
    client.enqueue_many("probe", [JobSpec({"sleep": 0.01}, "t") for _ in range(200)])
    wait_for(lambda: statuses(db) == {"succeeded": 200}, "200 jobs succeeded")
    rounds, span = completion_rounds(db)
    assert rounds <= span / window + 2, f"{rounds} completion statements over {span:.2f} s"
    time.sleep(window)
    lone = client.enqueue("probe", {}, tenant="t")
    wait_for(lambda: job_row(db, lone)["status"] == "succeeded", "the lone job succeeded")
    row = job_row(db, lone)
    assert row["finished_at"] - row["started_at"] < timedelta(seconds=window / 2)


def test_progress_keeps_a_job_running_past_its_lease(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=2)
    job_id = client.enqueue("probe", {"steps": 50, "step_seconds": 0.1}, tenant="t")
    workers.start({"probe": 1})
    wait_for(lambda: job_row(db, job_id)["status"] == "succeeded", "the long job succeeded")
    assert attempt_outcomes(db, job_id) == ["succeeded"], "2.5 lease lengths, one attempt"


def test_lost_lease_is_visible_to_the_handler(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=1)
    payload = {"record": True, "steps": 3, "stall_after": 0, "slow_attempts": 1}
    job_id = client.enqueue("probe", payload, tenant="t")
    w = workers.start({"probe": 2})
    wait_for(lambda: job_row(db, job_id)["status"] == "succeeded", "the retry succeeded")
    wait_for(lambda: (1, "progress_raised") in probe_events(db, job_id), "attempt 1 saw LeaseLost")
    assert w.stop() == 0
    events = probe_events(db, job_id)
    # Attempt 2 may start before attempt 1 notices (the sweeper reclaims on the
    # database clock, attempt 1 reads its own): each attempt's own order is the property.
    assert [e for e in events if e[0] == 1][:3] == [(1, "start"), (1, "stalled"), (1, "lost")]
    assert (2, "end") in events
    assert attempt_outcomes(db, job_id) == ["expired", "succeeded"]
    stale = db.execute(
        "SELECT detail->>'op' FROM fairsched.job_events"
        " WHERE job_id = %s AND kind = 'stale_completion_rejected'",
        (job_id,),
    ).fetchall()
    assert stale == [("complete",)], "attempt 1's late completion was refused"


def test_async_handlers_run_on_the_event_loop(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, "aprobe", lease=2)
    ok = client.enqueue_many("aprobe", [JobSpec({"steps": 3}, "t") for _ in range(40)])
    long = client.enqueue("aprobe", {"steps": 40, "step_seconds": 0.1, "record": True}, tenant="t")
    bad = client.enqueue("aprobe", {"fail": "permanent"}, tenant="t")
    workers.start({"aprobe": 16})
    wait_for(lambda: statuses(db) == {"succeeded": 41, "dead": 1}, "async jobs done")
    assert job_row(db, bad)["status"] == "dead"
    assert attempt_outcomes(db, long) == ["succeeded"], "async progress renews the lease"
    assert all(attempt_outcomes(db, job_id) == ["succeeded"] for job_id in ok)


def test_sigterm_lets_the_running_job_finish_within_grace(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=10)
    running = client.enqueue("probe", {"record": True, "sleep": 1.0}, tenant="t")
    w = workers.start({"probe": 1}, settings={"FAIRSCHED_GRACE_PERIOD_SECONDS": "30"})
    wait_for(lambda: probe_events(db, running), "the job started")
    waiting = client.enqueue("probe", {}, tenant="t")
    w.send(signal.SIGTERM)
    assert w.wait() == 0
    assert job_row(db, running)["status"] == "succeeded"
    row = job_row(db, waiting)
    assert (row["status"], row["attempt_count"]) == ("pending", 0), "nothing claimed after SIGTERM"


def test_sigterm_releases_jobs_still_running_after_grace(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=30)
    job_id = client.enqueue("probe", {"record": True, "sleep": 120}, tenant="t")
    start = job_row(db, job_id)["lease_token"]
    assert isinstance(start, int)
    w = workers.start({"probe": 1}, settings={"FAIRSCHED_GRACE_PERIOD_SECONDS": "0.5"})
    wait_for(lambda: probe_events(db, job_id), "the job started")
    w.send(signal.SIGTERM)
    assert w.wait() == 0
    row = job_row(db, job_id)
    assert (row["status"], row["attempt_count"], row["lease_token"]) == ("pending", 0, start + 1)
    assert attempt_outcomes(db, job_id) == ["released"]
    [lease] = client.claim("probe", owner="next")
    assert (lease.id, lease.token, lease.attempt) == (job_id, start + 2, 1), "claimable at once"


def test_sigterm_releases_async_jobs_still_running_after_grace(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, "aprobe", lease=30)
    job_id = client.enqueue("aprobe", {"steps": 600, "step_seconds": 0.1}, tenant="t")
    w = workers.start({"aprobe": 2}, settings={"FAIRSCHED_GRACE_PERIOD_SECONDS": "0.5"})
    wait_for(lambda: job_row(db, job_id)["status"] == "running", "the async job started")
    w.send(signal.SIGTERM)
    assert w.wait() == 0
    row = job_row(db, job_id)
    assert (row["status"], row["attempt_count"]) == ("pending", 0)
    assert attempt_outcomes(db, job_id) == ["released"]
    assert "Traceback" not in w.output() and "destroyed" not in w.output()


def test_worker_waits_out_an_unreachable_database(tmp_path: Path) -> None:
    with running_workers("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1", tmp_path) as ws:
        w = ws.start({"probe": 1})
        wait_for(lambda: "database not reachable" in w.output(), "the worker reports the outage")
        assert w.proc.poll() is None, "an outage does not end the worker"
        assert w.stop() == 0


def test_worker_refuses_an_undeclared_queue(client: Client, workers: Workers) -> None:
    w = workers.start({"aprobe": 1})
    assert w.wait() == 1
    assert "unknown queue 'aprobe'" in w.output()


def test_worker_refuses_a_queue_without_handler(client: Client, workers: Workers) -> None:
    declare(client, "reports")
    w = workers.start({"reports": 1})
    assert w.wait() == 1
    assert "no handler for queue 'reports'" in w.output()


def test_worker_with_64_slots_stays_small(client: Client, db: psycopg.Connection, workers: Workers) -> None:
    declare(client)
    w = workers.start({"probe": 64})
    wait_listening(db, 1)
    client.enqueue_many("probe", [JobSpec({"sleep": 0.02}, "t") for _ in range(2000)])
    wait_for(lambda: statuses(db) == {"succeeded": 2000}, "2000 jobs succeeded")
    status = Path(f"/proc/{w.pid}/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    print(f"\nworker RSS at 64 slots after 2000 jobs: {rss_kb / 1024:.1f} MB")
    assert rss_kb <= 150 * 1024


def test_worker_serves_its_metrics(client: Client, db: psycopg.Connection, workers: Workers) -> None:
    declare(client)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workers.start({"probe": 4}, extra_args=("--metrics-port", str(port)))
    wait_listening(db, 1)
    client.enqueue_many("probe", [JobSpec({}, "t") for _ in range(30)])
    client.enqueue("probe", {"fail": "permanent"}, tenant="t")
    wait_for(lambda: statuses(db) == {"succeeded": 30, "dead": 1}, "jobs done")

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text: str = response.read().decode()
            return text

    def samples() -> dict[str, float]:
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in scrape().splitlines()
            if line.startswith("fairsched_") and not line.startswith("fairsched_db_")
        }

    wait_for(lambda: samples().get('fairsched_completions_total{queue="probe"}') == 30, "completions counted")
    seen = samples()
    assert seen['fairsched_worker_slots{queue="probe"}'] == 4
    assert seen['fairsched_claims_total{queue="probe"}'] == 31
    assert seen['fairsched_dead_total{queue="probe"}'] == 1
    assert not any(name.startswith("fairsched_retries_total{") for name in seen)
    assert seen['fairsched_lease_expirations_total{queue="probe"}'] == 0
    assert seen['fairsched_failures_total{error_code="fairsched.errors.PermanentError",queue="probe"}'] == 1
    assert seen['fairsched_wait_seconds_count{queue="probe"}'] == 31
    assert seen['fairsched_run_duration_seconds_count{outcome="succeeded",queue="probe"}'] == 30
    assert seen['fairsched_tenant_claims_total{queue="probe",tenant="other"}'] == 31, "undeclared tenant"
    assert seen['fairsched_worker_slots_busy{queue="probe"}'] == 0

    slow = client.enqueue("probe", {"record": True, "sleep": 2.0}, tenant="t")
    wait_for(lambda: (1, "start") in probe_events(db, slow), "the slow job started")
    assert samples()['fairsched_worker_slots_busy{queue="probe"}'] == 1, "read when scraped"
    wait_for(lambda: job_row(db, slow)["status"] == "succeeded", "the slow job done")
    wait_for(lambda: samples()['fairsched_worker_slots_busy{queue="probe"}'] == 0, "its slot free again")


# -- claiming under a backlog ----------------------------------------------------


def claim_sizes(db: psycopg.Connection) -> list[int]:
    """Jobs per claim, in claim order (a claim's jobs share its owner and start time)."""
    rows = db.execute(
        "SELECT count(*) FROM fairsched.jobs GROUP BY lease_owner, started_at ORDER BY started_at"
    ).fetchall()
    return [n for (n,) in rows]


def test_a_backlog_of_long_jobs_is_claimed_at_the_pace_slots_free(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    """Unpaced, the 20 slots that start together free together and are claimed again in
    one claim of ~20, run time after run time."""
    client.declare_queue("probe", QueueSettings(lease_seconds=30))
    client.enqueue_many("probe", [JobSpec({"sleep": 0.3}, "t") for _ in range(100)])
    workers.start({"probe": 20})
    wait_for(lambda: statuses(db) == {"succeeded": 100}, "100 jobs succeeded")
    first, *paced = claim_sizes(db)
    assert first == 20, "the first claim fills every slot: no run time known yet"
    assert paced and max(paced) <= 2, f"paced claims take a start or two each, got {paced}"


def running_by_tenant(db: psycopg.Connection) -> dict[str, int]:
    """Running jobs per tenant."""
    rows = db.execute("SELECT tenant, count(*) FROM fairsched.jobs WHERE status = 'running' GROUP BY tenant")
    return dict(rows.fetchall())


@pytest.mark.parametrize(
    ("policies", "notify", "reserved"),
    [(["weighted"], True, 2), (["weighted"], False, 0), (["fifo"], True, 0)],
    ids=["weighted", "weighted-without-notify", "fifo"],
)
def test_a_weighted_queue_that_notifies_keeps_slots_free_for_new_work(
    client: Client, db: psycopg.Connection, workers: Workers, policies: list[str], notify: bool, reserved: int
) -> None:
    """32 slots at the default reserve fraction (1/16): 2 stay free under a backlog, through
    polls every 0.2 s, on the queues where a new tenant's job goes first and a notification
    opens them; elsewhere a reserve would only idle slots."""
    client.declare_queue("probe", QueueSettings(lease_seconds=30, policies=policies, notify=notify))
    client.enqueue_many("probe", [JobSpec({"sleep": 5.0}, "big") for _ in range(100)])
    workers.start({"probe": 32})
    wait_for(lambda: running_by_tenant(db) == {"big": 32 - reserved}, f"{32 - reserved} jobs running")
    time.sleep(1.0)  # five polls
    assert running_by_tenant(db) == {"big": 32 - reserved}


def test_a_notification_opens_the_reserved_slots_to_a_new_tenants_job(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    """Every unreserved slot runs one of the flood's 5 s jobs; a new tenant's job is
    enqueued. Its notification opens the reserved slots, and the job runs and finishes
    before any of the flood's: without the reserve it would wait 5 s for a slot."""
    client.declare_queue("probe", QueueSettings(lease_seconds=30, policies=["weighted"]))
    client.enqueue_many("probe", [JobSpec({"sleep": 5.0}, "big") for _ in range(100)])
    workers.start({"probe": 32}, settings={"FAIRSCHED_POLL_INTERVAL_SECONDS": "60"})
    wait_listening(db, 1)
    wait_for(lambda: running_by_tenant(db) == {"big": 30}, "30 jobs running")
    small = client.enqueue("probe", {}, tenant="small")
    wait_for(lambda: job_row(db, small)["status"] == "succeeded", "the new tenant's job done", timeout=3)
    assert statuses(db).get("succeeded") == 1, "no job of the flood had finished"


def test_a_short_weighted_claim_under_a_backlog_claims_again_at_once(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    """A tenant-first claim deals jobs to a tenant that has none left (its share row still
    active, held by another transaction so that no claim can take it out), as many as its
    cap of 2 leaves room for: every claim of 8 comes back with 6 while another tenant has
    200 jobs waiting. A claimer that read a short claim as "nothing left" would sleep
    until its next poll, a minute here."""
    client.declare_queue("probe", QueueSettings(lease_seconds=30, policies=["weighted"], notify=False))
    client.set_tenant_share("probe", "a-dry", weight=1, cap=2)
    db.execute("UPDATE fairsched.tenant_shares SET active = true, pass = 0 WHERE tenant = 'a-dry'")
    client.enqueue_many("probe", [JobSpec({}, "big") for _ in range(200)])
    with psycopg.connect(db.info.dsn) as holder:
        holder.execute("SELECT FROM fairsched.tenant_shares WHERE tenant = 'a-dry' FOR UPDATE")
        workers.start(
            {"probe": 8},
            settings={"FAIRSCHED_POLL_INTERVAL_SECONDS": "60", "FAIRSCHED_RECOVERY_INTERVAL_SECONDS": "60"},
        )
        wait_for(lambda: statuses(db) == {"succeeded": 200}, "200 jobs succeeded", timeout=20)
        sizes = claim_sizes(db)
        active = holder.execute("SELECT active FROM fairsched.tenant_shares WHERE tenant = 'a-dry'")
        active = active.fetchone()
    assert active == (True,), "the dry tenant stayed in the selection throughout"
    assert max(sizes) <= 6, f"the dry tenant's room left every claim short, got {sizes}"
