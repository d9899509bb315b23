"""Operator commands: tenant and policy tuning (live, with a running worker), aggregates,
dead-job filters, exit codes and shell completion."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from datetime import datetime

import psycopg
import pytest
from cli_support import cli, one_error_line
from ops_support import config_state
from policies_support import declare, fill
from worker_support import FAIRSCHED, running_workers, wait_for, wait_listening

from fairsched import Client, PermanentError
from fairsched.engine.enqueue import JobSpec


def test_tenant_weight_cap_list_and_show(client: Client, fresh_db: str) -> None:
    declare(client, "w", ["weighted"], tenant_cap=4)
    fill(client, "w", "acme", 3)
    assert cli(fresh_db, "tenant", "weight", "w", "acme", "2.5").stdout == "w/acme: weight 2.5\n"
    assert cli(fresh_db, "tenant", "cap", "w", "acme", "2").exit_code == 0
    assert cli(fresh_db, "tenant", "weight", "w", "globex", "5").exit_code == 0
    client.claim("w", owner="t", limit=3)

    listed = cli(fresh_db, "tenant", "list", "w", "--json")
    assert listed.exit_code == 0, listed.output
    rows = {r["tenant"]: r for r in json.loads(listed.stdout)}
    assert (rows["acme"]["weight"], rows["acme"]["cap"], rows["acme"]["running"]) == (2.5, 2, 2)
    assert rows["acme"]["claimed_total"] == 2 and rows["acme"]["share"] == 1.0
    assert (rows["globex"]["weight"], rows["globex"]["cap"], rows["globex"]["effective_cap"]) == (
        5.0,
        None,
        4,
    )
    table = cli(fresh_db, "tenant", "list", "w").stdout
    assert "acme" in table and "4 (queue)" in table

    shown = json.loads(cli(fresh_db, "tenant", "show", "w", "acme", "--json").stdout)
    assert (shown["claimable"], shown["running"], shown["claimed_total"]) == (1, 2, 2)
    assert cli(fresh_db, "tenant", "cap", "w", "acme", "none").stdout == "w/acme: cap none\n"
    assert json.loads(cli(fresh_db, "tenant", "show", "w", "acme", "--json").stdout)["cap"] is None
    assert "claimable" in cli(fresh_db, "tenant", "show", "w", "acme").stdout

    note = cli(fresh_db, "tenant", "weight", "q", "acme", "3")
    assert note.exit_code == 0 and "orders no tenants" in note.stdout


HOSTILE_QUEUES = ["q;drop table x", 'q"x', "q\nx", "x" * 100, "", "nope"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["weight", "w", "acme", "0"], "weight must be a number in [0.001, 1000000]"),
        (["weight", "w", "acme", "-1"], "weight must be a number in [0.001, 1000000]"),
        (["weight", "w", "acme", "nan"], "weight must be a number"),
        (["weight", "w", "acme", "inf"], "weight must be a number"),
        (["weight", "w", "acme", "1e7"], "weight must be a number"),
        (["weight", "w", "acme", "five"], "is not a number"),
        (["cap", "w", "acme", "-3"], "cap must be a positive whole number or none"),
        (["cap", "w", "acme", "0"], "cap must be a positive whole number or none"),
        (["cap", "w", "acme", "1.5"], "cap must be a positive whole number or none"),
        (["weight", "w", "a\nb", "2"], "tenant"),
        (["weight", "w", "x" * 129, "2"], "tenant is 129 characters"),
        (["weight", "w", "a\x00b", "2"], "tenant"),
        *[(["weight", q, "acme", "2"], "queue") for q in HOSTILE_QUEUES],
        *[(["cap", q, "acme", "2"], "queue") for q in HOSTILE_QUEUES],
    ],
)
def test_bad_tenant_values_are_one_line_and_change_nothing(
    client: Client, fresh_db: str, db: psycopg.Connection, args: list[str], message: str
) -> None:
    declare(client, "w", ["weighted"], tenants={"acme": {"weight": 3, "cap": 2}})
    fill(client, "w", "acme", 2)
    before = config_state(db)
    result = cli(fresh_db, "tenant", *args)
    assert result.exit_code == 1, result.output
    assert message in one_error_line(result)
    assert config_state(db) == before


def test_policy_show_and_set(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    declare(client, "p", ["fifo"], tenants={"acme": {"weight": 2}})
    shown = json.loads(cli(fresh_db, "policy", "show", "p", "--json").stdout)
    assert shown["policies"] == ["fifo"] and shown["tenants"] == {"acme": {"weight": 2.0, "cap": None}}
    assert "policies" in cli(fresh_db, "policy", "show", "p").stdout

    args = [
        "--policies=weighted,aging,serial",
        "--aging-interval=30",
        "--serial-gap=lowest",
        "--serial-poison=skip",
        "--charge=runtime",
        "--tenant-cap=5",
        "--lease=45",
        "--max-runtime=600",
        "--max-attempts=4",
        "--unknown-max-attempts=2",
        "--backoff-base=2",
        "--backoff-max=60",
        "--no-notify",
    ]
    result = cli(fresh_db, "policy", "set", "p", *args)
    assert result.exit_code == 0, result.output
    assert "p.lease_seconds: 0.0 -> 45" not in result.stdout
    assert "p.lease_seconds: 30 -> 45" in result.stdout.splitlines()
    assert "p.max_attempts: 3 -> 4 (jobs enqueued from now on)" in result.stdout.splitlines()
    row = db.execute(
        "SELECT policies, aging_interval_seconds, serial_gap, serial_poison, charge, tenant_cap, "
        "lease_seconds, max_runtime_seconds, max_attempts, unknown_max_attempts, backoff_base_seconds, "
        "backoff_max_seconds, notify FROM fairsched.queues WHERE name = 'p'"
    ).fetchone()
    assert row == (
        ["weighted", "aging", "serial"],
        30.0,
        "lowest",
        "skip",
        "runtime",
        5,
        45.0,
        600.0,
        4,
        2,
        2.0,
        60.0,
        False,
    )
    assert db.execute("SELECT weight FROM fairsched.tenant_shares WHERE tenant = 'acme'").fetchone() == (2.0,)

    assert cli(fresh_db, "policy", "set", "p", "--tenant-cap", "none").exit_code == 0
    assert db.execute("SELECT tenant_cap FROM fairsched.queues WHERE name = 'p'").fetchone() == (None,)
    assert cli(fresh_db, "policy", "set", "p", "--lease", "45").stdout == "p: nothing changed\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policies", "weighted,nope"], "unknown policy 'nope'"),
        (["--policies", "fifo,fifo"], "a policy appears twice"),
        (["--policies", "Bad;Name"], "policies.0"),
        (["--policies", ""], "policies: List should have at least 1 item"),
        (["--lease", "0"], "lease_seconds: Input should be greater than 0"),
        (["--lease", "-5"], "lease_seconds: Input should be greater than 0"),
        (["--max-runtime", "-1"], "max_runtime_seconds"),
        (["--max-attempts", "0"], "max_attempts"),
        (["--backoff-base", "-1"], "backoff_base_seconds"),
        (["--aging-interval", "0"], "aging_interval_seconds"),
        (["--serial-gap", "sometimes"], "serial_gap: Input should be 'strict' or 'lowest'"),
        (["--serial-poison", "x'; drop"], "serial_poison"),
        (["--charge", "money"], "charge"),
        (["--tenant-cap", "-2"], "--tenant-cap must be a positive whole number"),
        (["--policies", "fifo,serial"], "only on a drained queue"),
    ],
)
def test_bad_policy_values_are_one_line_and_change_nothing(
    client: Client, fresh_db: str, db: psycopg.Connection, args: list[str], message: str
) -> None:
    declare(client, "p", ["weighted"], tenants={"acme": {"weight": 3}})
    fill(client, "p", "acme", 2)
    before = config_state(db)
    result = cli(fresh_db, "policy", "set", "p", *args)
    assert result.exit_code == 1, result.output
    assert message in one_error_line(result)
    assert config_state(db) == before


@pytest.mark.parametrize("queue", HOSTILE_QUEUES)
def test_policy_commands_refuse_hostile_or_unknown_queues(
    client: Client, fresh_db: str, db: psycopg.Connection, queue: str
) -> None:
    before = config_state(db)
    for args in (["set", queue, "--lease", "5"], ["show", queue]):
        result = cli(fresh_db, "policy", *args)
        assert result.exit_code == 1, result.output
        assert "queue" in one_error_line(result)
    assert config_state(db) == before


def test_policy_set_without_a_setting_is_a_usage_error(client: Client, fresh_db: str) -> None:
    assert cli(fresh_db, "policy", "set", "q").exit_code == 2
    assert cli(fresh_db, "policy", "set", "q", "--lease", "abc").exit_code == 2


def test_a_queue_turned_weighted_keeps_serving_its_backlog(client: Client, fresh_db: str) -> None:
    declare(client, "f", ["fifo"])
    for tenant in ("a", "b"):
        fill(client, "f", tenant, 5)
    assert cli(fresh_db, "policy", "set", "f", "--policies", "weighted").exit_code == 0
    assert cli(fresh_db, "tenant", "weight", "f", "b", "4").exit_code == 0
    leases = client.claim("f", owner="t", limit=5)
    assert Counter(lease.tenant for lease in leases) == {"a": 1, "b": 4}


def test_serial_can_be_added_to_a_drained_queue(client: Client, fresh_db: str) -> None:
    declare(client, "s", ["fifo"])
    assert cli(fresh_db, "policy", "set", "s", "--policies", "fifo,serial").exit_code == 0
    client.enqueue_many("s", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=i) for i in (1, 2)])
    assert len(client.claim("s", owner="t", limit=2)) == 1


def test_live_changes_reach_a_running_worker(
    client: Client, fresh_db: str, db: psycopg.Connection, tmp_path: object
) -> None:
    """Weights, caps, lease, runtime and backoff changed by the CLI apply to a running worker's
    next claims and failures, without a restart."""
    declare(client, "ops", ["weighted"], lease_seconds=30)
    for tenant in ("a", "b"):
        client.enqueue_many("ops", [JobSpec({"ms": 15}, tenant) for _ in range(1500)])

    def started_after(when: datetime) -> Counter[str]:
        rows = db.execute(
            "SELECT tenant, count(*) FROM fairsched.jobs WHERE started_at > %s GROUP BY tenant", (when,)
        ).fetchall()
        return Counter(dict(rows))

    def db_now() -> datetime:
        row = db.execute("SELECT now()").fetchone()
        assert row is not None
        return row[0]

    with running_workers(fresh_db, tmp_path, app="apps.ops:app") as workers:  # type: ignore[arg-type]
        workers.start({"ops": 4})
        wait_listening(db, 1)
        start = db_now()
        wait_for(lambda: sum(started_after(start).values()) >= 150, "150 claims at equal weights")
        before = started_after(start)
        assert cli(fresh_db, "tenant", "weight", "ops", "a", "9").exit_code == 0
        changed = db_now()
        time.sleep(1.5)  # the worker's claims in flight finish; what follows is under the new weight
        settled = db_now()
        wait_for(lambda: sum(started_after(settled).values()) >= 150, "150 claims after the change")
        after = started_after(settled)
        share_before = before["a"] / sum(before.values())
        share_after = after["a"] / sum(after.values())
        print(f"tenant a's share: {share_before:.2f} at weight 1:1, {share_after:.2f} at 9:1 ({changed})")
        assert 0.35 < share_before < 0.65
        assert share_after > 0.8

        assert cli(fresh_db, "policy", "set", "ops", "--lease", "77", "--max-runtime", "50").exit_code == 0
        time.sleep(1.5)
        slow = client.enqueue_many("ops", [JobSpec({"ms": 3000}, "slow", priority=10)])
        wait_for(
            lambda: (
                db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", slow).fetchone() == ("running",)
            ),
            "the slow job runs",
        )
        lease = db.execute(
            "SELECT extract(epoch FROM lease_expires_at - started_at) FROM fairsched.jobs WHERE id = %s", slow
        ).fetchone()
        assert lease is not None and float(lease[0]) == 50.0

        assert (
            cli(fresh_db, "policy", "set", "ops", "--backoff-base", "3600", "--backoff-max", "3600").exit_code
            == 0
        )
        time.sleep(1.5)
        [held] = client.enqueue_many("ops", [JobSpec({"fail": True}, "failing", max_attempts=3)])
        wait_for(
            lambda: (
                db.execute("SELECT attempt_count FROM fairsched.jobs WHERE id = %s", (held,)).fetchone()
                == (1,)
                and db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (held,)).fetchone()
                == ("pending",)
            ),
            "one failed attempt",
        )
        delay = db.execute(
            "SELECT extract(epoch FROM available_at - now()) FROM fairsched.jobs WHERE id = %s", (held,)
        ).fetchone()
        assert delay is not None and float(delay[0]) > 1.0

        assert (
            cli(fresh_db, "policy", "set", "ops", "--backoff-base", "0", "--backoff-max", "0").exit_code == 0
        )
        time.sleep(1.5)
        [fast] = client.enqueue_many("ops", [JobSpec({"fail": True}, "failing", max_attempts=3)])
        wait_for(
            lambda: (
                db.execute(
                    "SELECT status, attempt_count FROM fairsched.jobs WHERE id = %s", (fast,)
                ).fetchone()
                == ("dead", 3)
            ),
            "retried at once until dead",
        )
        assert db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (held,)).fetchone() == (
            "pending",
        )


def dead_with(client: Client, tenant: str, error: BaseException | str) -> int:
    job_id = client.enqueue("q", {}, tenant=tenant)
    [lease] = client.claim("q", owner="t")
    assert client.fail(
        lease, error, kind="permanent", code=None if isinstance(error, BaseException) else "boom"
    )
    return job_id


def test_dead_list_filters_by_code_and_since(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    old = dead_with(client, "acme", PermanentError("bad"))
    boom = dead_with(client, "acme", "boom happened")
    db.execute("UPDATE fairsched.jobs SET finished_at = now() - interval '3 hours' WHERE id = %s", (old,))

    def ids(*args: str) -> list[int]:
        result = cli(fresh_db, "dead", "list", "--json", *args)
        assert result.exit_code == 0, result.output
        return [row["id"] for row in json.loads(result.stdout)]

    assert ids() == [boom, old]
    assert ids("--code", "boom") == [boom]
    assert ids("--code", "fairsched.errors.PermanentError") == [old]
    assert ids("--since", "1h") == [boom]
    assert ids("--since", "4h", "--tenant", "acme") == [boom, old]
    assert ids("--since", "2000-01-01T00:00:00+00:00", "--queue", "q") == [boom, old]
    for bad in ("yesterday", "2000-01-01T00:00:00"):
        refused = cli(fresh_db, "dead", "list", "--since", bad)
        assert refused.exit_code == 1 and "--since" in one_error_line(refused)


def test_aggregate_list_unblock_and_skip(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    declare(client, "s", ["serial"], serial_poison="block")
    specs = [JobSpec({}, "acme", aggregate_key=key, aggregate_seq=i) for key in ("k1", "k2") for i in (1, 2)]
    client.enqueue_many("s", specs)
    for lease in client.claim("s", owner="t", limit=2):
        assert client.fail(lease, "poison", kind="permanent")

    listed = cli(fresh_db, "aggregate", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert sorted(b["aggregate_key"] for b in json.loads(listed.stdout)) == ["k1", "k2"]
    assert "k1" in cli(fresh_db, "aggregate", "list", "--queue", "s").stdout
    assert json.loads(cli(fresh_db, "aggregate", "list", "--queue", "other", "--json").stdout) == []

    unblocked = cli(fresh_db, "aggregate", "unblock", "s", "acme", "k1")
    assert unblocked.exit_code == 0, unblocked.output
    skipped = cli(fresh_db, "aggregate", "skip", "s", "acme", "k2")
    assert skipped.exit_code == 0, skipped.output
    rows = db.execute(
        "SELECT aggregate_key, aggregate_seq, status FROM fairsched.jobs ORDER BY 1, 2"
    ).fetchall()
    assert rows == [("k1", 1, "pending"), ("k1", 2, "waiting"), ("k2", 1, "discarded"), ("k2", 2, "pending")]
    assert cli(fresh_db, "aggregate", "list").stdout.strip() == "no blocked aggregates"

    again = cli(fresh_db, "aggregate", "skip", "s", "acme", "k2")
    assert again.exit_code == 1
    assert one_error_line(again) == "error: aggregate 'k2' of tenant 'acme' on 's' is not blocked"


def test_shell_completion_script_and_completions() -> None:
    """``--show-completion bash`` prints the script; the hook it installs completes commands."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRSCHED_", "_FAIRSCHED"))}
    script = subprocess.run(
        [str(FAIRSCHED), "--show-completion", "bash"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "complete -o default -F _fairsched_completion fairsched" in script
    assert "_FAIRSCHED_COMPLETE=complete_bash" in script
    hook = {
        **env,
        "_FAIRSCHED_COMPLETE": "complete_bash",
        "COMP_WORDS": "fairsched tenant w",
        "COMP_CWORD": "2",
    }
    completed = subprocess.run([str(FAIRSCHED)], env=hook, capture_output=True, text=True, check=False)
    assert completed.stdout.split() == ["weight"]


def test_usage_errors_exit_2_and_help_documents_exit_codes() -> None:
    assert cli(None, "tenant", "weight", "q").exit_code == 2
    assert cli(None, "aggregate", "bogus").exit_code == 2
    assert cli(None, "top", "--interval", "0").exit_code == 2
    helped = cli(None, "--help")
    assert helped.exit_code == 0
    text = " ".join(helped.stdout.replace("│", " ").split())
    assert "Exit status: 0 ok, 1 failure" in text and "2 usage error" in text
