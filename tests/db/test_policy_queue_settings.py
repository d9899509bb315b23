"""The built-in policies' queue settings (aging_interval_seconds; charge, tenant_cap;
serial_gap, serial_poison) are Settings their policies own, kept in their columns of
``fairsched.queues``: set through config apply, ``policy set``, ``policy setting`` and the
API, read back typed; bad values refused at every entry with one line and nothing
changed; refused on a stack without their policy unless equal to the default; a changed
interval re-keys the backlog whichever entry changed it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_support import cli, one_error_line
from fault_support import db_snapshot

from fairsched import Client, JobSpec, QueueSettings
from fairsched.config import sync as configsync
from fairsched.errors import InvalidInput
from fairsched.policy.owned import owned_settings

STACK = ["weighted", "aging", "serial"]

SET = {  # setting: (a value other than the default, its `policy set` option, the default)
    "aging_interval_seconds": (30.0, "--aging-interval", 60.0),
    "charge": ("runtime", "--charge", "count"),
    "tenant_cap": (5, "--tenant-cap", None),
    "serial_gap": ("lowest", "--serial-gap", "strict"),
    "serial_poison": ("skip", "--serial-poison", "block"),
}

BAD = {  # setting: (a value out of bounds, the message)
    "aging_interval_seconds": (
        2_592_001,
        "aging_interval_seconds: Input should be less than or equal to 2592000",
    ),
    "charge": ("money", "charge: Input should be 'count' or 'runtime'"),
    "tenant_cap": (1_000_001, "tenant_cap: Input should be less than or equal to 1000000"),
    "serial_gap": ("sometimes", "serial_gap: Input should be 'strict' or 'lowest'"),
    "serial_poison": ("x'; drop", "serial_poison: Input should be 'block' or 'skip'"),
}


def columns(db: psycopg.Connection, queue: str = "p") -> dict[str, Any]:
    row = db.execute(
        "SELECT aging_interval_seconds, charge, tenant_cap, serial_gap, serial_poison FROM fairsched.queues"
        " WHERE name = %s",
        (queue,),
    ).fetchone()
    assert row is not None
    return dict(zip(SET, row, strict=True))


def read_back(client: Client, queue: str = "p") -> dict[str, Any]:
    with client.connection() as conn:
        stored = configsync.queue_settings(conn, queue)
    return {name: getattr(stored, name) for name in SET}


WANTED = {name: value for name, (value, _option, _default) in SET.items()}
DEFAULTS = {name: default for name, (_value, _option, default) in SET.items()}


def test_the_policies_declare_them_with_their_defaults() -> None:
    owned = owned_settings()
    assert {n: (owned[n].policy, owned[n].setting.default) for n in SET} == {
        "aging_interval_seconds": ("aging", 60.0),
        "charge": ("weighted", "count"),
        "tenant_cap": ("weighted", None),
        "serial_gap": ("serial", "strict"),
        "serial_poison": ("serial", "block"),
    }
    assert QueueSettings().aging_interval_seconds == 60.0  # read as attributes: the default
    assert QueueSettings(policies=["aging"], aging_interval_seconds=30).aging_interval_seconds == 30.0


def test_config_apply_writes_them_and_removes_them(
    client: Client, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text(
        '[queues.p]\npolicies = ["weighted", "aging", "serial"]\naging_interval_seconds = 30\n'
        'charge = "runtime"\ntenant_cap = 5\nserial_gap = "lowest"\nserial_poison = "skip"\n'
    )
    assert cli(client.dsn, "config", "apply", str(path)).exit_code == 0
    assert columns(db) == WANTED
    assert read_back(client) == WANTED
    exported = cli(client.dsn, "config", "export").stdout
    assert "aging_interval_seconds = 30.0\n" in exported and "tenant_cap = 5\n" in exported
    diff = cli(client.dsn, "config", "diff", str(path)).stdout.splitlines()
    assert diff == ["queues.q: file - | database declared (config apply keeps it)"]  # the fixture's

    # The file is the whole truth: a key it no longer gives goes back to its default.
    path.write_text('[queues.p]\npolicies = ["weighted", "aging", "serial"]\n')
    assert cli(client.dsn, "config", "apply", str(path)).exit_code == 0
    assert columns(db) == DEFAULTS
    exported = cli(client.dsn, "config", "export").stdout
    assert 'aging_interval_seconds = 60.0\ncharge = "count"\nserial_gap = "strict"\n' in exported


def test_policy_set_writes_them(client: Client, db: psycopg.Connection) -> None:
    client.declare_queue("p", QueueSettings(policies=STACK))
    args = [f"{option}={value}" for value, option, _default in SET.values()]
    result = cli(client.dsn, "policy", "set", "p", *args)
    assert result.exit_code == 0, result.output
    assert "p.aging_interval_seconds: 60 -> 30" in result.stdout.splitlines()
    assert "p.tenant_cap: none -> 5" in result.stdout.splitlines()
    assert columns(db) == WANTED
    assert cli(client.dsn, "policy", "set", "p", "--tenant-cap", "none").exit_code == 0
    assert columns(db)["tenant_cap"] is None
    shown = cli(client.dsn, "policy", "show", "p", "--json").stdout
    assert '"aging_interval_seconds": 30.0' in shown and '"tenant_cap": null' in shown


def test_policy_setting_and_the_api_write_them(client: Client, db: psycopg.Connection) -> None:
    client.declare_queue("p", QueueSettings(policies=STACK))
    for name, (value, _option, _default) in SET.items():
        result = cli(client.dsn, "policy", "setting", "p", name, str(value))
        assert result.exit_code == 0, result.output
        assert result.stdout == f"p: {name} {value}\n"
    assert columns(db) == WANTED
    for name in SET:
        client.set_policy_setting("p", name, "off")
    assert columns(db) == DEFAULTS
    client.declare_queue("p", QueueSettings(policies=STACK, **WANTED))
    assert read_back(client) == WANTED
    client.set_policy_setting("p", "aging_interval_seconds", 45)  # typed values, as the API gives them
    assert columns(db)["aging_interval_seconds"] == 45.0


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_refused_at_every_entry_and_changes_nothing(
    client: Client, db: psycopg.Connection, tmp_path: Path, name: str
) -> None:
    client.declare_queue("p", QueueSettings(policies=STACK))
    value, message = BAD[name]
    before = db_snapshot(db)
    path = tmp_path / "fairsched.toml"
    shown = f'"{value}"' if isinstance(value, str) else value
    path.write_text(f'[queues.p]\npolicies = ["weighted", "aging", "serial"]\n{name} = {shown}\n')
    applied = cli(client.dsn, "config", "apply", str(path))
    assert applied.exit_code == 1 and f"queues.p.{name}: " + message.split(": ", 1)[1] in one_error_line(
        applied
    )
    option = SET[name][1]
    by_option = cli(client.dsn, "policy", "set", "p", option, str(value))
    assert by_option.exit_code == 1 and (
        name in one_error_line(by_option) or option in one_error_line(by_option)
    )
    by_name = cli(client.dsn, "policy", "setting", "p", name, str(value))
    assert by_name.exit_code == 2 and message in one_error_line(by_name)
    with pytest.raises(InvalidInput, match=message):
        client.set_policy_setting("p", name, value)
    with pytest.raises(ValueError, match=name):
        QueueSettings(policies=STACK, **{name: value})
    assert db_snapshot(db) == before


def test_a_stack_without_the_policy(client: Client, db: psycopg.Connection, tmp_path: Path) -> None:
    """Refused like any policy's setting where its policy does not apply; the default value
    (what every queue holds anyway) and no value at all are fine on every stack."""
    client.declare_queue("p", QueueSettings(policies=["fifo"]))
    before = db_snapshot(db)
    path = tmp_path / "fairsched.toml"
    path.write_text('[queues.p]\npolicies = ["fifo"]\nserial_gap = "lowest"\n')
    refused = cli(client.dsn, "config", "apply", str(path))
    assert refused.exit_code == 1
    assert "serial_gap given, but the policy stack [fifo] has no serial: add serial to policies" in (
        one_error_line(refused)
    )
    assert cli(client.dsn, "policy", "set", "p", "--charge", "runtime").exit_code == 1
    setting = cli(client.dsn, "policy", "setting", "p", "aging_interval_seconds", "30")
    assert setting.exit_code == 1 and "has no aging" in one_error_line(setting)
    with pytest.raises(InvalidInput, match="has no weighted"):
        client.set_policy_setting("p", "tenant_cap", 3)
    assert db_snapshot(db) == before

    path.write_text('[queues.p]\npolicies = ["fifo"]\nserial_gap = "strict"\naging_interval_seconds = 60\n')
    assert cli(client.dsn, "config", "apply", str(path)).exit_code == 0
    path.write_text('[queues.p]\npolicies = ["fifo"]\n')
    assert cli(client.dsn, "config", "apply", str(path)).exit_code == 0
    assert columns(db) == DEFAULTS
    assert "aging_interval_seconds" not in cli(client.dsn, "config", "export").stdout


def test_a_new_interval_given_by_name_rekeys_the_backlog(
    client: Client, db: psycopg.Connection, tmp_path: Path
) -> None:
    client.declare_queue("p", QueueSettings(policies=["aging"], aging_interval_seconds=1000))
    client.enqueue_many("p", [JobSpec({}, "t", priority=p) for p in (0, 1, 2)])
    stray = (
        "SELECT count(*) FROM fairsched.jobs AS j JOIN fairsched.queues AS q ON q.name = j.queue_name"
        " WHERE j.aging_key <> extract(epoch FROM j.created_at) - j.priority * q.aging_interval_seconds"
    )
    assert cli(client.dsn, "policy", "setting", "p", "aging_interval_seconds", "10").exit_code == 0
    assert db.execute(stray).fetchone() == (0,)
    client.set_policy_setting("p", "aging_interval_seconds", 20)
    assert db.execute(stray).fetchone() == (0,)
    path = tmp_path / "fairsched.toml"
    path.write_text('[queues.p]\npolicies = ["aging"]\naging_interval_seconds = 5\n')
    applied = cli(client.dsn, "config", "apply", str(path))
    assert "queues.p: aging_interval_seconds changed, 2 queued jobs updated" in applied.stdout.splitlines()
    assert db.execute(stray).fetchone() == (0,)
    # A file that no longer gives it puts the default back: a change too.
    path.write_text('[queues.p]\npolicies = ["aging"]\n')
    applied = cli(client.dsn, "config", "apply", str(path))
    assert "queues.p: aging_interval_seconds changed, 2 queued jobs updated" in applied.stdout.splitlines()
    assert db.execute(stray).fetchone() == (0,)


def test_aging_adopts_its_column_and_uninstall_keeps_it(fresh_db: str, db: psycopg.Connection) -> None:
    comment = "SELECT col_description('fairsched.queues'::regclass, attnum) FROM pg_attribute"
    comment += " WHERE attrelid = 'fairsched.queues'::regclass AND attname = 'aging_interval_seconds'"
    assert db.execute(comment).fetchone() == (
        "aging policy: defined by its migrations (fairsched_policies/migrations/aging)",
    )
    with Client(fresh_db) as client:
        client.declare_queue("p", QueueSettings(policies=["fifo"]))
    assert cli(fresh_db, "policy", "uninstall", "aging", "--yes").exit_code == 0
    assert columns(db)["aging_interval_seconds"] == 60.0
    with Client(fresh_db) as client:
        client.enqueue("p", {}, tenant="t")  # enqueue keys jobs by the column still
