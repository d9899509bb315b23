"""A cap means what it says: on a queue whose stack enforces no caps (its tenant order does
not: fifo, aging, serial, ratelimit) a tenant's cap and the queue's ``tenant_cap`` are
refused at every entry with one clear error, changing nothing: the API (sync and async,
declaring a queue), the CLI, the configuration file (apply and diff), the dashboard's
action and the database function itself, whichever role calls it. Removing a cap stays
allowed everywhere; on a weighted stack caps are accepted and enforced; a new stack that
would leave caps unenforced is refused, naming them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest
from cli_support import cli, one_error_line
from fault_support import db_snapshot
from psycopg.conninfo import make_conninfo

from fairsched import AsyncClient, Client, JobSpec, QueueSettings
from fairsched.errors import InvalidInput
from fairsched.settings import TenantSettings
from fairsched.web.actions import ACTIONS

UNENFORCED = ["fifo", "aging", "serial", "ratelimit"]

REFUSED = r"queue p's policy stack \[{stack}\] enforces no caps, so a cap would not shape its claims: add"
IN_FILE = "tenants.t.cap given, but the policy stack [{stack}] enforces no caps: add weighted to policies"
IN_DB = r"queue p's policy stack \[{stack}\] does not name weighted, which alone enforces caps"
TENANT_CAP = "has no weighted, so a tenant_cap would not shape its claims"


def raw_share_set(dsn: str, role: str, cap: int) -> None:
    """``fairsched.tenant_share_set`` called as ``role``, in a transaction of its own."""
    with psycopg.connect(make_conninfo(dsn, options=f"-c role={role}")) as conn:
        conn.execute("SELECT * FROM fairsched.tenant_share_set('p', 't', NULL, %s, 'raw')", (cap,))


def toml(stack: str, text: str) -> str:
    return f'[queues.p]\npolicies = ["{stack}"]\n{text}'


@pytest.mark.parametrize("stack", UNENFORCED)
def test_a_cap_is_refused_at_every_entry_and_changes_nothing(
    client: Client, db: psycopg.Connection, fresh_db: str, tmp_path: Path, stack: str
) -> None:
    client.declare_queue("p", QueueSettings(policies=[stack]))
    client.enqueue_many("p", [JobSpec({}, "t") for _ in range(3)])
    before = db_snapshot(db)
    refused = REFUSED.format(stack=stack)

    # The API, sync and async; weight and cap together change nothing either.
    with pytest.raises(InvalidInput, match=refused):
        client.set_tenant_share("p", "t", cap=1)
    with pytest.raises(InvalidInput, match=refused):
        client.set_tenant_share("p", "t", weight=3, cap=2)

    async def set_async() -> None:
        async with AsyncClient(fresh_db) as aclient:
            await aclient.set_tenant_share("p", "t", cap=1)

    with pytest.raises(InvalidInput, match=refused):
        asyncio.run(set_async())
    # Declaring the queue with caps: refused by the settings themselves.
    with pytest.raises(ValueError, match=r"tenants\.t\.cap given, but the policy stack"):
        QueueSettings(policies=[stack], tenants={"t": TenantSettings(cap=1)})
    with pytest.raises(ValueError, match="tenant_cap given, but the policy stack"):
        QueueSettings(policies=[stack], tenant_cap=1)

    # The CLI.
    by_cap = cli(client.dsn, "tenant", "cap", "p", "t", "1")
    assert by_cap.exit_code == 1 and "enforces no caps, so a cap would not" in one_error_line(by_cap)
    by_set = cli(client.dsn, "policy", "set", "p", "--tenant-cap", "1")
    assert by_set.exit_code == 1 and "tenant_cap given, but the policy stack" in one_error_line(by_set)
    by_setting = cli(client.dsn, "policy", "setting", "p", "tenant_cap", "1")
    assert by_setting.exit_code == 1 and TENANT_CAP in one_error_line(by_setting)

    # The configuration file: a queue's tenant, its tenant_cap, a top-level tenant.
    path = tmp_path / "fairsched.toml"
    for text, message in [
        ("[queues.p.tenants.t]\ncap = 1\n", IN_FILE.format(stack=stack)),
        ("tenant_cap = 1\n", f"tenant_cap given, but the policy stack [{stack}] has no weighted"),
        ("[tenants.t]\ncap = 1\n", "tenants.t.cap given, but no queue's policy stack enforces caps"),
    ]:
        path.write_text(toml(stack, text))
        for command in ("apply", "diff"):
            result = cli(client.dsn, "config", command, str(path))
            assert result.exit_code == 1 and message in one_error_line(result), (command, text)

    # The dashboard's action: its preview, and the change itself.
    tenant = ACTIONS["tenant"]
    params = tenant.parse({"queue": "p", "tenant": "t", "cap": "2", "weight": "4"})
    with client.connection() as conn, pytest.raises(InvalidInput, match=refused):
        tenant.preview(conn, params)
    with pytest.raises(InvalidInput, match=refused):
        tenant.perform(client, params, "web:ada")

    # The database function, called raw by the roles that may call it.
    for role in ("fairsched_admin", "fairsched_web"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=IN_DB.format(stack=stack)):
            raw_share_set(fresh_db, role, 1)

    assert db_snapshot(db) == before
    assert len(client.claim("p", owner="w", limit=5)) == 3  # no cap holds the tenant back


@pytest.mark.parametrize("stack", UNENFORCED)
def test_removing_a_cap_stays_allowed_everywhere(
    client: Client, db: psycopg.Connection, fresh_db: str, stack: str
) -> None:
    client.declare_queue("p", QueueSettings(policies=[stack]))
    client.set_tenant_share("p", "t", cap=0)
    client.set_tenant_share("p", "t", weight=2)  # weights are stored, as before
    assert cli(client.dsn, "tenant", "cap", "p", "t", "none").exit_code == 0
    assert cli(client.dsn, "policy", "set", "p", "--tenant-cap", "none").exit_code == 0
    assert cli(client.dsn, "policy", "setting", "p", "tenant_cap", "off").exit_code == 0
    tenant = ACTIONS["tenant"]
    params = tenant.parse({"queue": "p", "tenant": "t", "cap": "none"})
    with client.connection() as conn:
        assert tenant.preview(conn, params) == [("cap", "none", "none")]
    tenant.perform(client, params, "web:ada")
    raw_share_set(fresh_db, "fairsched_web", 0)
    shares = db.execute("SELECT weight, cap FROM fairsched.tenant_shares WHERE queue_name = 'p'")
    assert shares.fetchall() == [(2.0, None)]


@pytest.mark.parametrize("stack", [["weighted"], ["weighted", "aging", "serial"], ["weighted", "ratelimit"]])
def test_caps_are_accepted_and_enforced_on_a_weighted_stack(
    client: Client, db: psycopg.Connection, fresh_db: str, tmp_path: Path, stack: list[str]
) -> None:
    client.declare_queue("p", QueueSettings(policies=stack))
    client.enqueue_many("p", [JobSpec({}, t) for t in ("t", "u", "v") for _ in range(4)])
    client.set_tenant_share("p", "t", cap=1)
    assert cli(client.dsn, "tenant", "cap", "p", "u", "2").exit_code == 0
    raw_share_set(fresh_db, "fairsched_web", 1)  # t again, through the database function
    path = tmp_path / "fairsched.toml"
    path.write_text(f"[queues.p]\npolicies = {stack!r}\ntenant_cap = 3\n[queues.p.tenants.u]\ncap = 2\n")
    assert cli(client.dsn, "config", "apply", str(path)).exit_code == 0
    claimed = client.claim("p", owner="w", limit=12)
    running = {t: sum(lease.tenant == t for lease in claimed) for t in ("t", "u", "v")}
    assert running == {"t": 1, "u": 2, "v": 3}


def test_a_stack_that_would_leave_caps_unenforced_is_refused_naming_them(
    client: Client, db: psycopg.Connection, tmp_path: Path
) -> None:
    """Caps are never dropped silently: a new stack that enforces none is refused while
    tenants of the queue have caps; once they are removed it is taken. (The queue's
    ``tenant_cap`` is a setting of the weighted policy: kept, unread, like any policy's
    setting on a stack without its policy.)"""
    client.declare_queue("p", QueueSettings(policies=["weighted"], tenants={"a": TenantSettings(cap=2)}))
    client.set_tenant_share("p", "b", cap=3)
    before = db_snapshot(db)
    named = "queue p: the policy stack [fifo] enforces no caps, but tenants a (cap 2), b (cap 3) have caps"
    with pytest.raises(InvalidInput, match=r"tenants a \(cap 2\), b \(cap 3\) have caps: remove them first"):
        client.declare_queue("p", QueueSettings(policies=["fifo"]))
    by_set = cli(client.dsn, "policy", "set", "p", "--policies", "fifo")
    assert by_set.exit_code == 1 and named in one_error_line(by_set)
    path = tmp_path / "fairsched.toml"
    path.write_text('[queues.p]\npolicies = ["aging"]\n[queues.p.tenants.a]\nweight = 2\n')
    applied = cli(client.dsn, "config", "apply", str(path))
    assert applied.exit_code == 1 and "tenants b (cap 3) have caps" in one_error_line(applied)
    assert db_snapshot(db) == before

    # The prune removes b's settings in the same transaction: nothing capped is left.
    pruned = cli(client.dsn, "config", "apply", "--prune", str(path))
    assert pruned.exit_code == 0, pruned.output
    assert db.execute("SELECT policies FROM fairsched.queues WHERE name = 'p'").fetchone() == (["aging"],)
    assert db.execute("SELECT count(*) FROM fairsched.tenant_shares WHERE cap IS NOT NULL").fetchone() == (0,)


def test_caps_stored_before_they_were_refused_stay_readable(client: Client, db: psycopg.Connection) -> None:
    """A database that holds caps on a queue that enforces none (set before the refusal)
    still reads back: shown, exported, and removable."""
    client.declare_queue("p", QueueSettings(policies=["fifo"]))
    db.execute("INSERT INTO fairsched.tenant_shares (queue_name, tenant, cap) VALUES ('p', 't', 4)")
    assert "cap = 4" in cli(client.dsn, "config", "export").stdout
    assert cli(client.dsn, "policy", "show", "p").exit_code == 0
    assert cli(client.dsn, "tenant", "cap", "p", "t", "none").exit_code == 0
    assert db.execute("SELECT cap FROM fairsched.tenant_shares WHERE tenant = 't'").fetchone() == (None,)
