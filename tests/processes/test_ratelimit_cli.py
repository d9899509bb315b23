"""``fairsched tenant rate`` and the rates ``tenant show`` and ``policy show`` display."""

from __future__ import annotations

import json

import psycopg
import pytest
from cli_support import cli, one_error_line
from ops_support import config_state
from policies_support import declare, fill

from fairsched import Client


def rate_state(db: psycopg.Connection) -> dict[str, list[tuple[object, ...]]]:
    rates = db.execute(
        "SELECT queue_name, tenant, jobs, period_seconds, tokens FROM fairsched.ratelimits ORDER BY 1, 2"
    ).fetchall()
    state: dict[str, list[tuple[object, ...]]] = config_state(db)
    return state | {"rates": rates}


def test_tenant_rate_sets_and_removes_a_rate(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    declare(client, "rl", ["weighted", "ratelimit"])
    set_ = cli(fresh_db, "tenant", "rate", "rl", "acme", "50/s")
    assert (set_.exit_code, set_.stdout) == (0, "rl/acme: rate 50/s\n")
    assert cli(fresh_db, "tenant", "rate", "rl", "acme", " 3 / h ").stdout == "rl/acme: rate 3/h\n"
    rows = db.execute("SELECT tenant, jobs, period_seconds FROM fairsched.ratelimits").fetchall()
    assert rows == [("acme", 3, 3600.0)]
    off = cli(fresh_db, "tenant", "rate", "rl", "acme", "off")
    assert (off.exit_code, off.stdout) == (0, "rl/acme: rate off\n")
    assert db.execute("SELECT count(*) FROM fairsched.ratelimits WHERE jobs IS NOT NULL").fetchone() == (0,)


@pytest.mark.parametrize(
    "rate", ["0/s", "-1/s", "inf/s", "nan/s", "5", "5/w", "1.5/s", "lots", "", "9999999/s"]
)
def test_a_bad_rate_exits_2_with_one_line_and_changes_nothing(
    client: Client, fresh_db: str, db: psycopg.Connection, rate: str
) -> None:
    declare(client, "rl", ["ratelimit"])
    client.set_tenant_rate("rl", "acme", "5/s")
    before = rate_state(db)
    result = cli(fresh_db, "tenant", "rate", "rl", "acme", rate)
    assert result.exit_code == 2, result.output
    assert "N/s, N/m, N/h or N/d" in one_error_line(result)
    assert rate_state(db) == before


@pytest.mark.parametrize(
    ("queue", "message"),
    [("w", "queue w's policy stack [weighted] has no ratelimit"), ("nope", "unknown queue 'nope'")],
)
def test_a_rate_on_a_queue_without_ratelimit_is_refused(
    client: Client, fresh_db: str, db: psycopg.Connection, queue: str, message: str
) -> None:
    declare(client, "w", ["weighted"])
    before = rate_state(db)
    result = cli(fresh_db, "tenant", "rate", queue, "acme", "5/s")
    assert result.exit_code == 1
    assert message in one_error_line(result)
    assert rate_state(db) == before


def test_tenant_show_and_policy_show_display_rates(client: Client, fresh_db: str) -> None:
    declare(client, "rl", ["weighted", "ratelimit"], tenants={"acme": {"weight": 2}})
    client.set_queue_rate("rl", "10/m")
    client.set_tenant_rate("rl", "acme", "1/h")
    fill(client, "rl", "acme", 2)
    assert [lease.tenant for lease in client.claim("rl", owner="t", limit=2)] == ["acme"]

    shown = json.loads(cli(fresh_db, "tenant", "show", "rl", "acme", "--json").stdout)
    assert (shown["rate"], shown["queue_rate"], shown["throttled"]) == ("1/h", "10/m", True)
    assert 0 <= shown["rate_budget"] < 1 and shown["weight"] == 2.0
    other = json.loads(cli(fresh_db, "tenant", "show", "rl", "globex", "--json").stdout)
    assert (other["rate"], other["queue_rate"], other["throttled"]) == (None, "10/m", False)
    assert other["rate_budget"] == 10
    table = cli(fresh_db, "tenant", "show", "rl", "acme").stdout
    assert "queue_rate" in table and "10/m" in table and "1/h" in table

    policy = json.loads(cli(fresh_db, "policy", "show", "rl", "--json").stdout)
    assert policy["tenants"]["acme"] == {"weight": 2.0, "cap": None, "rate": "1/h"}
    assert "weight 2, cap none, rate 1/h" in cli(fresh_db, "policy", "show", "rl").stdout

    # Without ratelimit in the stack, neither shows a rate.
    plain = json.loads(cli(fresh_db, "tenant", "show", "q", "acme", "--json").stdout)
    assert "rate" not in plain and "queue_rate" not in plain
