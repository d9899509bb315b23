"""The command line against a real PostgreSQL: every command, its JSON, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from cli_support import EXAMPLE_CONFIG, cli, one_error_line

from fairsched import Client, PermanentError
from fairsched.errors import JobNotFound


def count_jobs(db: psycopg.Connection) -> int:
    row = db.execute("SELECT count(*) FROM fairsched.jobs").fetchone()
    assert row is not None
    return int(row[0])


def dead_job(client: Client, tenant: str) -> int:
    """Enqueue a job on ``q`` and send it to dead with a permanent failure."""
    job_id = client.enqueue("q", {"tenant": tenant}, tenant=tenant)
    [lease] = client.claim("q", owner="test")
    assert client.fail(lease, PermanentError("unsupported version"))
    return job_id


def test_enqueue_prints_the_id_and_stores_every_option(
    client: Client, fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text('{"to": "a@example.com"}')
    args = [
        "enqueue",
        "--queue=q",
        "--tenant=acme",
        f"--payload=@{payload}",
        "--priority=5",
        "--aggregate-key=order-1",
        "--aggregate-seq=2",
        "--run-at=2030-01-02T03:04:05+00:00",
        "--max-attempts=4",
        "--idempotency-key=k1",
    ]
    result = cli(fresh_db, *args)
    assert result.exit_code == 0, result.output
    job_id = int(result.stdout)
    row = db.execute(
        "SELECT tenant, payload, priority, aggregate_key, aggregate_seq, available_at, max_attempts, "
        "idempotency_key FROM fairsched.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    assert row[:5] == ("acme", {"to": "a@example.com"}, 5, "order-1", 2)
    assert row[5].isoformat() == "2030-01-02T03:04:05+00:00"
    assert row[6:] == (4, "k1")

    again = cli(fresh_db, *args)
    assert again.exit_code == 0 and int(again.stdout) == job_id
    assert count_jobs(db) == 1


def test_enqueue_reads_the_payload_from_stdin(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    result = cli(fresh_db, "enqueue", "--queue", "q", "--tenant", "t", "--payload", "@-", input="[1, 2]")
    assert result.exit_code == 0, result.output
    row = db.execute("SELECT payload FROM fairsched.jobs WHERE id = %s", (int(result.stdout),)).fetchone()
    assert row == ([1, 2],)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--payload", "{not json"], "payload is not valid JSON"),
        (["--payload", "@/nonexistent/payload.json"], "cannot read payload file"),
        (["--queue", "nope"], "unknown queue 'nope'"),
        (["--queue", "bad name;drop"], "invalid queue name"),
        (["--tenant", "evil\x00tenant"], "tenant"),
        (["--aggregate-key", "order-1"], "aggregate_key and aggregate_seq"),
        (["--run-at", "2030-01-01T00:00:00"], "has no time zone"),
        (["--run-at", "tomorrow"], "not an ISO 8601 timestamp"),
        (["--payload", json.dumps({"blob": "x" * 5000})], "limit is 4096 bytes"),
    ],
)
def test_enqueue_bad_input_is_one_line_and_changes_nothing(
    client: Client, fresh_db: str, db: psycopg.Connection, args: list[str], message: str
) -> None:
    base = {"--queue": "q", "--tenant": "t"}
    overrides = dict(zip(args[::2], args[1::2], strict=True))
    flat = [part for key, value in {**base, **overrides}.items() for part in (key, value)]
    result = cli(fresh_db, "enqueue", *flat, FAIRSCHED_MAX_PAYLOAD_BYTES="4096")
    assert result.exit_code == 1
    assert message in one_error_line(result)
    assert count_jobs(db) == 0


def test_usage_errors_exit_2(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    assert cli(fresh_db, "enqueue", "--queue", "q").exit_code == 2
    assert cli(fresh_db, "dead", "show", "not-a-number").exit_code == 2
    assert cli(fresh_db, "no-such-command").exit_code == 2
    assert count_jobs(db) == 0


def test_recover_prints_the_counts(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    for tenant in ("a", "b"):
        client.enqueue("q", {}, tenant=tenant)
    client.claim("q", owner="crashed", limit=2)
    db.execute("UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 second'")
    db.execute("UPDATE fairsched.jobs SET max_attempts = 1 WHERE tenant = 'b'")

    result = cli(fresh_db, "recover", "--json")
    assert result.exit_code == 0, result.output
    # The job back in pending lies above the queue's heads, never raised yet: both are
    # (the default order's and the aging policy's).
    assert json.loads(result.stdout) == {"retried": 1, "dead": 1, "heads_raised": 2, "failed": {}}
    statuses = db.execute("SELECT tenant, status FROM fairsched.jobs ORDER BY tenant").fetchall()
    assert statuses == [("a", "pending"), ("b", "dead")]

    quiet = cli(fresh_db, "recover")
    assert quiet.stdout.splitlines() == [
        "expired leases recovered: 0 back to pending, 0 dead",
        "claim heads raised: 0",
    ]


def test_dead_list_filters_and_prints_json_or_a_table(client: Client, fresh_db: str) -> None:
    first = dead_job(client, "acme")
    second = dead_job(client, "globex")

    listed = cli(fresh_db, "dead", "list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [row["id"] for row in rows] == [second, first]
    assert rows[0]["last_error_code"] == "fairsched.errors.PermanentError"
    assert rows[0]["tenant"] == "globex"

    only_acme = json.loads(cli(fresh_db, "dead", "list", "--tenant", "acme", "--json").stdout)
    assert [row["id"] for row in only_acme] == [first]
    assert json.loads(cli(fresh_db, "dead", "list", "--queue", "other", "--json").stdout) == []
    assert len(json.loads(cli(fresh_db, "dead", "list", "--limit", "1", "--json").stdout)) == 1

    table = cli(fresh_db, "dead", "list")
    assert table.exit_code == 0
    assert "globex" in table.stdout and "unsupported version" in table.stdout


def test_dead_show_has_the_job_and_its_history(client: Client, fresh_db: str) -> None:
    job_id = dead_job(client, "acme")
    shown = cli(fresh_db, "dead", "show", str(job_id), "--json")
    assert shown.exit_code == 0, shown.output
    job = json.loads(shown.stdout)
    assert (job["id"], job["status"], job["payload"]) == (job_id, "dead", {"tenant": "acme"})
    assert [(h["kind"], h["detail"]["outcome"]) for h in job["history"]] == [("attempt", "dead")]

    table = cli(fresh_db, "dead", "show", str(job_id))
    assert table.exit_code == 0
    assert "history" in table.stdout and "unsupported version" in table.stdout

    missing = cli(fresh_db, "dead", "show", "999999")
    assert missing.exit_code == 1
    assert one_error_line(missing) == "error: no job with id 999999"


def test_dead_replay_and_discard(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    replayed = dead_job(client, "acme")
    discarded = dead_job(client, "acme")

    result = cli(fresh_db, "dead", "replay", str(replayed))
    assert result.exit_code == 0, result.output
    assert cli(fresh_db, "dead", "discard", str(discarded)).exit_code == 0
    statuses = dict(db.execute("SELECT id, status FROM fairsched.jobs").fetchall())
    assert statuses == {replayed: "pending", discarded: "discarded"}
    events = db.execute("SELECT job_id, kind, detail->>'by' FROM fairsched.job_events ORDER BY id").fetchall()
    assert events == [(replayed, "replayed", "cli"), (discarded, "discarded", "cli")]

    # Neither job is dead any more: both commands refuse and change nothing.
    for command, job_id in (("replay", discarded), ("discard", replayed)):
        refused = cli(fresh_db, "dead", command, str(job_id))
        assert refused.exit_code == 1
        assert one_error_line(refused) == f"error: job {job_id} is not dead (or does not exist)"
    assert dict(db.execute("SELECT id, status FROM fairsched.jobs").fetchall()) == statuses


def test_debug_lets_the_exception_through(client: Client, fresh_db: str) -> None:
    result = cli(fresh_db, "--debug", "dead", "replay", "424242")
    assert result.exit_code == 1
    assert isinstance(result.exception, JobNotFound)


def test_migrate_command_on_an_empty_database(empty_db: str) -> None:
    first = cli(empty_db, "migrate")
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("applied: 001_")
    again = cli(empty_db, "migrate")
    assert again.stdout.strip() == "schema is up to date"


def test_commands_on_an_unmigrated_database_say_to_migrate(empty_db: str) -> None:
    result = cli(empty_db, "dead", "list")
    assert result.exit_code == 1
    assert "run `fairsched migrate`" in one_error_line(result)


def test_unreachable_database_is_one_line_without_the_password() -> None:
    result = cli("postgresql://fairsched:s3cret-pw@127.0.0.1:1/app", "recover")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "cannot reach PostgreSQL" in line
    assert "s3cret-pw" not in result.output


def test_config_check_accepts_the_example(tmp_path: Path) -> None:
    result = cli(None, "config", "check", str(EXAMPLE_CONFIG), "--json")
    assert result.exit_code == 0, result.output
    checked = json.loads(result.stdout)
    assert checked["queues"] == ["emails", "reports"]
    assert checked["tenants"] == {"acme": 5.0, "globex": 2.0, "initech": 1.0}
    via_env = cli(None, "config", "check", FAIRSCHED_CONFIG=str(EXAMPLE_CONFIG))
    assert via_env.exit_code == 0
    assert via_env.stdout.strip().endswith("ok (queues: emails, reports; tenants: 3)")
    assert cli(None, "config", "check").exit_code == 2


def test_config_apply_declares_the_queues(fresh_db: str, db: psycopg.Connection) -> None:
    result = cli(fresh_db, "config", "apply", str(EXAMPLE_CONFIG))
    assert result.exit_code == 0, result.output
    rows = db.execute(
        "SELECT name, lease_seconds, max_attempts, backoff_max_seconds, notify "
        "FROM fairsched.queues ORDER BY name"
    ).fetchall()
    assert rows == [("emails", 30.0, 8, 300.0, True), ("reports", 120.0, 4, 1800.0, False)]
    policies = db.execute("SELECT name, policies FROM fairsched.queues ORDER BY name").fetchall()
    assert policies == [("emails", ["weighted", "aging", "serial"]), ("reports", ["fifo"])]
    weights = db.execute(
        "SELECT queue_name, tenant, weight, cap FROM fairsched.tenant_shares ORDER BY tenant"
    ).fetchall()
    assert weights == [("emails", "acme", 5.0, 20), ("emails", "globex", 2.0, None)]


def test_config_apply_is_atomic(fresh_db: str, db: psycopg.Connection) -> None:
    """A failure on the second queue leaves the first undeclared too."""
    db.execute(
        """CREATE FUNCTION refuse_reports() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.name = 'reports' THEN RAISE EXCEPTION 'reports refused'; END IF;
             RETURN NEW;
           END $$"""
    )
    db.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON fairsched.queues "
        "FOR EACH ROW EXECUTE FUNCTION refuse_reports()"
    )
    result = cli(fresh_db, "config", "apply", str(EXAMPLE_CONFIG))
    assert result.exit_code == 1
    assert "reports refused" in one_error_line(result)
    assert db.execute("SELECT count(*) FROM fairsched.queues").fetchone() == (0,)


def test_config_apply_refuses_a_broken_file(fresh_db: str, db: psycopg.Connection, tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[queues.emails]\nlease_seconds = 30\n\n[queues.reports]\nlease_seconds = -1\n")
    result = cli(fresh_db, "config", "apply", str(broken))
    assert result.exit_code == 1
    assert one_error_line(result) == (
        f"error: {broken}: queues.reports.lease_seconds: Input should be greater than 0 (got -1)"
    )
    assert db.execute("SELECT count(*) FROM fairsched.queues").fetchone() == (0,)
