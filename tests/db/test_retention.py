"""Retention: what is past its queue's retention leaves the tables, and nothing else does.

Time is stepped, not slept: a test moves a row's finished_at (or an audit row's time)
into the past, and the prune compares it with the database's now().
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest
from cli_support import cli, one_error_line
from pydantic import ValidationError

from bench.claimbench import ClaimPlan
from fairsched import Client, JobSpec, QueueSettings, load_settings
from fairsched.config import compare, live
from fairsched.config import sync as configsync
from fairsched.engine import claim, prune
from fairsched.errors import ConfigError, InvalidInput, JobNotFound, UnknownQueue

DAY = 86_400


def finished_jobs(
    db: psycopg.Connection, count: int, *, queue: str = "q", status: str = "succeeded"
) -> list[int]:
    """Jobs inserted as already finished now (what completions leave behind), in bulk."""
    rows = db.execute(
        "INSERT INTO fairsched.jobs (queue_name, tenant, payload, status, max_attempts, attempt_count,"
        " lease_token, lease_owner, started_at, finished_at)"
        " SELECT %s, 't', '{}', %s, 3, 1, 1, 'w', now(), now() FROM generate_series(1, %s)"
        " RETURNING id",
        (queue, status, count),
    ).fetchall()
    return [row[0] for row in rows]


def completed(client: Client, count: int) -> list[int]:
    """Jobs enqueued, claimed and completed through the API."""
    ids = client.enqueue_many("q", [JobSpec({"i": i}, "t") for i in range(count)])
    assert client.complete_many(client.claim("q", owner="w", limit=count)) == set(ids)
    return ids


def died(client: Client) -> int:
    """A job failed permanently: dead, with its attempt in the history."""
    job_id = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w")
    client.fail(lease, "boom", kind="permanent")
    return job_id


def age(db: psycopg.Connection, ids: list[int], seconds: float, *, history: bool = False) -> None:
    """Move the jobs' finished_at (with ``history``: their attempt records' and events'
    times instead) ``seconds`` into the past. The trigger that keeps succeeded rows
    unchanged is off for this one transaction."""
    with db.transaction():
        db.execute("SET LOCAL session_replication_role = replica")
        if history:
            db.execute(
                "UPDATE fairsched.attempt_log SET finished_at = finished_at - make_interval(secs => %s)"
                " WHERE job_id = ANY (%s)",
                (seconds, ids),
            )
            db.execute(
                "UPDATE fairsched.job_events SET at = at - make_interval(secs => %s) WHERE job_id = ANY (%s)",
                (seconds, ids),
            )
        else:
            db.execute(
                "UPDATE fairsched.jobs SET finished_at = finished_at - make_interval(secs => %s)"
                " WHERE id = ANY (%s)",
                (seconds, ids),
            )


def present(db: psycopg.Connection, ids: list[int]) -> set[int]:
    rows = db.execute("SELECT id FROM fairsched.jobs WHERE id = ANY (%s)", (ids,)).fetchall()
    return {row[0] for row in rows}


def history_rows(db: psycopg.Connection, ids: list[int]) -> int:
    row = db.execute(
        "SELECT (SELECT count(*) FROM fairsched.attempt_log WHERE job_id = ANY (%(ids)s))"
        "     + (SELECT count(*) FROM fairsched.job_events WHERE job_id = ANY (%(ids)s))",
        {"ids": ids},
    ).fetchone()
    assert row is not None
    return int(row[0])


def table_counts(db: psycopg.Connection) -> tuple[int, ...]:
    row = db.execute(
        "SELECT (SELECT count(*) FROM fairsched.jobs), (SELECT count(*) FROM fairsched.attempt_log),"
        " (SELECT count(*) FROM fairsched.job_events)"
    ).fetchone()
    assert row is not None
    return tuple(row)


# -- what goes and what stays -------------------------------------------------------------


def test_finished_jobs_past_retention_go_and_newer_ones_stay(client: Client, db: psycopg.Connection) -> None:
    old, new = completed(client, 5), completed(client, 3)
    discarded = died(client)
    client.dead_discard(discarded)
    pending = client.enqueue("q", {}, tenant="t")
    age(db, [*old, discarded], DAY + 60)  # the default keeps finished jobs one day

    result = client.prune()

    assert result.removed == {"q": {"finished": 6, "dead": 0, "history": 0}}  # history: 30 days
    assert present(db, [*old, discarded]) == set()
    assert present(db, [*new, pending]) == {*new, pending}
    assert client.prune().total == 0


def test_dead_jobs_stay_replayable_until_their_own_retention(client: Client, db: psycopg.Connection) -> None:
    job_id = died(client)
    age(db, [job_id], 29 * DAY)  # past the finished retention, not the dead one (30 days)

    assert client.prune().total == 0
    client.dead_replay(job_id)
    [lease] = client.claim("q", owner="w")
    assert lease.id == job_id
    client.fail(lease, "boom again", kind="permanent")

    age(db, [job_id], 31 * DAY)
    assert client.prune().removed["q"] == {"finished": 0, "dead": 1, "history": 0}
    assert present(db, [job_id]) == set()
    with pytest.raises(JobNotFound):
        client.dead_replay(job_id)


def test_attempt_history_is_pruned_on_its_own_schedule(client: Client, db: psycopg.Connection) -> None:
    client.declare_queue("q", QueueSettings(history_retention_seconds=7 * DAY))
    job_id = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w")
    client.fail(lease, "flaky", kind="retryable")  # an attempt record, kept apart from the job
    [lease] = client.claim("q", owner="w")
    assert client.complete(lease)
    kept_dead = died(client)
    age(db, [job_id], 2 * DAY)
    age(db, [job_id], 2 * DAY, history=True)
    age(db, [kept_dead], 10 * DAY, history=True)  # older than 7 days, but its job is kept

    assert client.prune().removed["q"] == {"finished": 1, "dead": 0, "history": 0}
    assert present(db, [job_id]) == set()
    assert history_rows(db, [job_id]) == 1  # the job is gone, its history is not (yet)

    age(db, [job_id], 6 * DAY, history=True)
    assert client.prune().removed["q"] == {"finished": 0, "dead": 0, "history": 1}
    assert history_rows(db, [job_id]) == 0
    assert history_rows(db, [kept_dead]) == 1
    assert client.job_show(kept_dead)["history"]


def test_a_dead_job_that_blocks_its_aggregate_stays(client: Client, db: psycopg.Connection) -> None:
    client.declare_queue("s", QueueSettings(policies=["fifo", "serial"], backoff_base_seconds=0))
    first = client.enqueue("s", {}, tenant="t", aggregate_key="a", aggregate_seq=1)
    client.enqueue("s", {}, tenant="t", aggregate_key="a", aggregate_seq=2)
    [lease] = client.claim("s", owner="w")
    client.fail(lease, "poison", kind="permanent")
    assert [b.blocked_job_id for b in client.aggregates_blocked(queue="s")] == [first]
    age(db, [first], 365 * DAY)

    assert client.prune(queue="s").total == 0
    assert present(db, [first]) == {first}


def test_a_dry_run_changes_nothing_and_counts_what_the_prune_removes(
    client: Client, db: psycopg.Connection
) -> None:
    old = completed(client, 4)
    dead_old, dead_new = died(client), died(client)
    completed(client, 2)
    age(db, [*old, dead_old], 40 * DAY)
    age(db, [dead_old], 40 * DAY, history=True)
    before = table_counts(db)

    dry = client.prune(dry_run=True)

    assert dry.dry_run
    assert table_counts(db) == before
    assert dry.removed == {"q": {"finished": 4, "dead": 1, "history": 1}}
    assert client.prune(batch=2).removed == dry.removed
    assert present(db, [dead_new]) == {dead_new}


def test_one_queue_or_every_queue_is_pruned(client: Client, db: psycopg.Connection) -> None:
    client.declare_queue("other")
    mine, theirs = finished_jobs(db, 3), finished_jobs(db, 2, queue="other")
    age(db, [*mine, *theirs], 2 * DAY)

    assert client.prune(queue="other").removed == {"other": {"finished": 2, "dead": 0, "history": 0}}
    assert present(db, mine) == set(mine)
    with pytest.raises(UnknownQueue):
        client.prune(queue="nope")
    with pytest.raises(InvalidInput):
        client.prune(batch=0)


# -- never in anyone's way ----------------------------------------------------------------


def test_the_prune_reads_its_index_in_small_batches(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    """Each batch finds its rows with a range scan of jobs_finished_idx and deletes them by
    primary key: it never reads the table sequentially, whatever else the table holds."""
    ids = finished_jobs(db, 20_000)
    db.execute(
        "INSERT INTO fairsched.jobs (queue_name, tenant, payload, max_attempts)"
        " SELECT 'q', 't', '{}', 3 FROM generate_series(1, 20000)"
    )
    age(db, ids[:2500], 2 * DAY)
    db.execute("ANALYZE fairsched.jobs")
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        reports: list[str] = []
        conn.add_notice_handler(lambda diag: reports.append(diag.message_primary or ""))
        for statement in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_format = json",
            "SET auto_explain.log_level = notice",
        ):
            conn.execute(statement)
        assert prune.jobs_prune(conn, batch=1000).removed["q"]["finished"] == 2500
    plans = [json.loads(r.split("plan:", 1)[1]) for r in reports if "plan:" in r]
    deletes = [p for p in plans if "DELETE FROM fairsched.jobs" in p["Query Text"]]
    finished = [ClaimPlan(p["Plan"], 0, 0) for p in deletes if "'discarded'" in p["Query Text"]]
    assert len(finished) == 3  # 1000 + 1000 + 500
    for plan in finished:
        assert "jobs_finished_idx" in plan.index_names(), plan.index_names()
    for p in deletes:  # the dead batch too
        assert not ClaimPlan(p["Plan"], 0, 0).seq_scans_over("jobs"), p["Plan"]


def test_two_prunes_at_once_neither_double_count_nor_block(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    ids = finished_jobs(db, 3000)
    age(db, ids, 2 * DAY)
    results: list[prune.PruneResult] = []

    def run() -> None:
        with Client(fresh_db) as mine:
            results.append(mine.prune(batch=100))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2
    rest = client.prune(batch=100)  # what a pass that found the other at work left
    assert sum(r.removed["q"]["finished"] for r in [*results, rest]) == 3000
    assert present(db, ids) == set()


def test_a_prune_finding_another_at_work_skips_its_turn(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    ids = finished_jobs(db, 10)
    age(db, ids, 2 * DAY)
    with psycopg.connect(fresh_db) as other:  # its transaction stays open: it holds the lock
        assert other.execute("SELECT fairsched.jobs_prune('q', 'finished', 4)").fetchone() == (4,)
        result = client.prune()
        assert result.skipped and result.total == 0
        other.rollback()
    assert client.prune().removed["q"]["finished"] == 10
    assert present(db, ids) == set()


def test_a_prune_skips_locked_rows_and_claims_never_wait_for_a_prune(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    ids = finished_jobs(db, 20)
    age(db, ids, 2 * DAY)
    waiting = client.enqueue_many("q", [JobSpec({}, "t") for _ in range(2)])
    with psycopg.connect(fresh_db) as holder:  # a transaction holding row locks: a claim's, a replay's
        holder.execute(
            "SELECT id FROM fairsched.jobs WHERE id = ANY (%s) FOR UPDATE", ([*ids[:2], waiting[0]],)
        )
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute("SET statement_timeout = '5s'")
            assert prune.jobs_prune(conn).removed["q"]["finished"] == 18
    assert present(db, ids) == set(ids[:2])

    with psycopg.connect(fresh_db) as pruning:  # a prune in the middle of its batch
        assert pruning.execute("SELECT fairsched.jobs_prune('q', 'finished', 1000)").fetchone() == (2,)
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute("SET statement_timeout = '5s'")
            leases = claim.jobs_claim(conn, "q", owner="w", limit=2)
        assert sorted(lease.id for lease in leases) == waiting
        assert client.complete_many(leases) == set(waiting)


# -- bounds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("finished_retention_seconds", 0),
        ("finished_retention_seconds", 31_536_001),
        ("dead_retention_seconds", 3_599),
        ("history_retention_seconds", 59),
        ("history_retention_seconds", 315_360_001),
    ],
)
def test_bad_retention_is_refused_by_the_api_and_nothing_changes(
    client: Client, db: psycopg.Connection, field: str, value: int
) -> None:
    before = configsync.queue_settings(db, "q")
    with pytest.raises(ValidationError, match=field):
        QueueSettings(**{field: value})
    with pytest.raises(InvalidInput, match=f"queue q: {field}: ") as refused:
        live.queue_settings_set(db, "q", {field: value})
    assert "\n" not in str(refused.value)
    assert configsync.queue_settings(db, "q") == before


def test_bad_retention_is_refused_by_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text("[queues.q]\ndead_retention_seconds = 60\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert "queues.q.dead_retention_seconds" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_bad_retention_is_refused_by_the_cli_and_nothing_changes(
    client: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    before = configsync.queue_settings(db, "q")
    for args in (
        ["--dead-retention", "10m"],
        ["--finished-retention", "-1"],
        ["--history-retention", "soon"],
    ):
        result = cli(fresh_db, "policy", "set", "q", *args)
        assert result.exit_code == 1, result.output
        assert args[0] in one_error_line(result) or "retention_seconds" in one_error_line(result)
    assert configsync.queue_settings(db, "q") == before

    result = cli(fresh_db, "policy", "set", "q", "--finished-retention", "12h", "--dead-retention", "7d")
    assert result.exit_code == 0, result.output
    after = configsync.queue_settings(db, "q")
    assert (after.finished_retention_seconds, after.dead_retention_seconds) == (43_200, 604_800)


@pytest.mark.parametrize(
    ("column", "value"),
    [("finished_retention_seconds", 0), ("dead_retention_seconds", 60), ("history_retention_seconds", 10**9)],
)
def test_bad_retention_is_refused_by_the_database(
    client: Client, db: psycopg.Connection, column: str, value: int
) -> None:
    before = configsync.queue_settings(db, "q")
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(f"UPDATE fairsched.queues SET {column} = %s WHERE name = 'q'", (value,))  # noqa: S608
    assert configsync.queue_settings(db, "q") == before


def test_retention_is_applied_diffed_and_exported(
    client: Client, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text("[queues.q]\nfinished_retention_seconds = 3600\nhistory_retention_seconds = 1209600\n")
    settings = load_settings(path)
    differences = [d.key for d in compare.diff(settings, configsync.database_settings(db))]
    assert "queues.q.finished_retention_seconds" in differences
    assert "queues.q.history_retention_seconds" in differences

    configsync.apply(db, settings)

    stored = configsync.queue_settings(db, "q")
    assert (stored.finished_retention_seconds, stored.history_retention_seconds) == (3600, 1_209_600)
    assert stored.dead_retention_seconds == QueueSettings().dead_retention_seconds
    exported = compare.export_toml(configsync.database_settings(db))
    assert "finished_retention_seconds = 3600" in exported
    assert not compare.diff(settings, configsync.database_settings(db))


def test_the_cli_prunes_and_dry_runs(client: Client, db: psycopg.Connection, fresh_db: str) -> None:
    ids = finished_jobs(db, 3)
    age(db, ids, 2 * DAY)

    dry = cli(fresh_db, "prune", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert '"finished": 3' in dry.stdout and '"dry_run": true' in dry.stdout
    assert present(db, ids) == set(ids)

    done = cli(fresh_db, "prune", "--queue", "q")
    assert done.exit_code == 0, done.output
    assert "rows removed" in done.stdout
    assert present(db, ids) == set()

    unknown = cli(fresh_db, "prune", "--queue", "nope")
    assert unknown.exit_code == 1
    assert "unknown queue 'nope'" in one_error_line(unknown)
