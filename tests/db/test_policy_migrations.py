"""A policy's own migrations: applied after the engine's under the same lock, recorded by
policy and version, refused when edited or no longer shipped; uninstalling a policy's
schema once no queue's stack names it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from cli_support import cli, one_error_line

from fairsched.db.migrate import load_migrations, migrate, policy_uninstall
from fairsched.errors import InvalidInput, MigrationError
from fairsched.policy.registry import registry

LEDGER = {
    "001_ledger_create.sql": "CREATE TABLE fairsched.ledger (queue_name text REFERENCES fairsched.queues);",
    "002_ledger_amount.sql": "ALTER TABLE fairsched.ledger ADD COLUMN amount int;",
    "uninstall.sql": "DROP TABLE fairsched.ledger;",
}
"""A policy's migrations: the first needs the engine's schema, so it must come after it."""


def policy_folder(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def recorded(conn: psycopg.Connection, policy: str | None = None) -> list[tuple[str, str, str, str]]:
    """The recorded policy migrations (of ``policy`` only, when given)."""
    rows = conn.execute(
        "SELECT policy, version, name, checksum FROM fairsched.policy_migrations "
        "WHERE policy = coalesce(%s, policy) ORDER BY policy, version",
        (policy,),
    )
    return [(str(p), str(v), str(n), str(c)) for p, v, n, c in rows.fetchall()]


def table_exists(conn: psycopg.Connection, name: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    return bool(row and row[0])


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def conn(empty_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(empty_db, autocommit=True) as c:
        yield c


def test_policy_migrations_apply_after_the_engines_in_policy_order_once(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    ledger = policy_folder(tmp_path / "ledger", LEDGER)
    audit = policy_folder(
        tmp_path / "audit", {"001_audit_create.sql": "CREATE TABLE fairsched.audit (x int);"}
    )
    engine = [m.name for m in load_migrations()]
    applied = migrate(conn, policies={"ledger": ledger, "audit": audit, "plain": None})
    assert applied == [
        *engine,
        "audit:001_audit_create",
        "ledger:001_ledger_create",
        "ledger:002_ledger_amount",
    ]
    assert recorded(conn) == [
        ("audit", "001", "001_audit_create", sha256("CREATE TABLE fairsched.audit (x int);")),
        ("ledger", "001", "001_ledger_create", sha256(LEDGER["001_ledger_create.sql"])),
        ("ledger", "002", "002_ledger_amount", sha256(LEDGER["002_ledger_amount.sql"])),
    ]
    assert migrate(conn, policies={"ledger": ledger, "audit": audit}) == []
    assert table_exists(conn, "fairsched.ledger") and table_exists(conn, "fairsched.audit")


def test_an_edited_applied_policy_migration_is_refused(conn: psycopg.Connection, tmp_path: Path) -> None:
    ledger = policy_folder(tmp_path / "ledger", {"001_ledger_create.sql": LEDGER["001_ledger_create.sql"]})
    migrate(conn, policies={"ledger": ledger})
    policy_folder(
        ledger,
        {
            "001_ledger_create.sql": "CREATE TABLE fairsched.ledger (id bigint);",
            "002_ledger_amount.sql": LEDGER["002_ledger_amount.sql"],
        },
    )
    with pytest.raises(MigrationError, match=r"policy 'ledger': migration 001_ledger_create .* different"):
        migrate(conn, policies={"ledger": ledger})
    assert [v for _, v, _, _ in recorded(conn)] == ["001"]


def test_a_recorded_version_the_policy_no_longer_ships_is_refused(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    ledger = policy_folder(tmp_path / "ledger", LEDGER)
    migrate(conn, policies={"ledger": ledger})
    (ledger / "002_ledger_amount.sql").unlink()
    with pytest.raises(MigrationError, match=r"'ledger'.*002_ledger_amount.*upgrade the policy package"):
        migrate(conn, policies={"ledger": ledger})
    with pytest.raises(MigrationError, match="upgrade the policy package"):
        migrate(conn, policies={"ledger": None})


def test_the_records_of_a_policy_no_longer_installed_are_left_alone(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    migrate(conn, policies={"ledger": policy_folder(tmp_path / "ledger", LEDGER)})
    assert migrate(conn, policies={}) == []
    assert len(recorded(conn)) == 2


def test_two_processes_migrating_at_once_apply_each_policy_migration_once(
    empty_db: str, tmp_path: Path
) -> None:
    """Policy migrations run under the engine's lock: the second process waits, then
    finds nothing to do."""
    ledger = policy_folder(
        tmp_path / "ledger",
        {**LEDGER, "001_ledger_create.sql": LEDGER["001_ledger_create.sql"] + " SELECT pg_sleep(1);"},
    )
    script = (
        "import sys, psycopg; from pathlib import Path; from fairsched.db.migrate import migrate\n"
        "with psycopg.connect(sys.argv[1], autocommit=True) as c:\n"
        "    print(','.join(migrate(c, policies={'ledger': Path(sys.argv[2])})))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, empty_db, str(ledger)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    engine = [m.name for m in load_migrations()]
    everything = ",".join([*engine, "ledger:001_ledger_create", "ledger:002_ledger_amount"])
    assert sorted(out.strip() for out, _ in outputs) == ["", everything]
    with psycopg.connect(empty_db) as conn:
        assert [(p, v) for p, v, _, _ in recorded(conn)] == [("ledger", "001"), ("ledger", "002")]


def test_uninstall_is_refused_while_a_queue_names_the_policy(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    policies = {"ledger": policy_folder(tmp_path / "ledger", LEDGER)}
    migrate(conn, policies=policies)
    conn.execute(
        "INSERT INTO fairsched.queues (name, policies) VALUES ('b', '{fifo,ledger}'), ('a', '{ledger}')"
    )
    with pytest.raises(
        MigrationError, match=r"queues a, b: change their stacks first with `fairsched policy set"
    ):
        policy_uninstall(conn, "ledger", policies=policies)
    assert table_exists(conn, "fairsched.ledger")
    assert len(recorded(conn)) == 2


def test_uninstall_runs_the_policys_script_and_forgets_it_so_migrate_applies_it_again(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    policies = {"ledger": policy_folder(tmp_path / "ledger", LEDGER)}
    migrate(conn, policies=policies)
    done = policy_uninstall(conn, "ledger", policies=policies)
    assert (done.migrations, done.script) == (
        ("001_ledger_create", "002_ledger_amount"),
        LEDGER["uninstall.sql"],
    )
    assert not table_exists(conn, "fairsched.ledger")
    assert recorded(conn) == []
    assert migrate(conn, policies=policies) == ["ledger:001_ledger_create", "ledger:002_ledger_amount"]
    assert table_exists(conn, "fairsched.ledger")


def test_uninstall_forgets_a_removed_policy_without_a_script(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    migrate(conn, policies={"ledger": policy_folder(tmp_path / "ledger", LEDGER)})
    done = policy_uninstall(conn, "ledger", policies={})
    assert (len(done.migrations), done.script) == (2, None)
    assert recorded(conn) == []
    assert table_exists(conn, "fairsched.ledger")


def test_uninstall_of_an_installed_policy_without_a_script_is_refused(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    """Forgetting the records while the schema stays would have the next migrate apply
    the migrations again over it: refused, before any stack is looked at."""
    files = {name: text for name, text in LEDGER.items() if name != "uninstall.sql"}
    policies = {"ledger": policy_folder(tmp_path / "ledger", files)}
    migrate(conn, policies=policies)
    conn.execute("INSERT INTO fairsched.queues (name, policies) VALUES ('a', '{ledger}')")
    with pytest.raises(
        MigrationError, match=r"^policy 'ledger' ships migrations but no uninstall.sql, so its schema stays"
    ):
        policy_uninstall(conn, "ledger", policies=policies)
    assert table_exists(conn, "fairsched.ledger")
    assert len(recorded(conn)) == 2


def test_uninstall_of_an_unknown_policy_is_an_error(conn: psycopg.Connection) -> None:
    migrate(conn, policies={})
    with pytest.raises(InvalidInput, match="unknown policy 'nosuch': it is not installed"):
        policy_uninstall(conn, "nosuch", policies={})


PLUGIN = """
from pathlib import Path

from fairsched.policy import BasePolicy


class Ledger(BasePolicy):
    name = "ledger"

    def migrations(self) -> Path:
        return Path(__file__).parent / "ledger_migrations"
"""


@pytest.fixture
def ledger_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Policy ``ledger`` installed through its own entry point (a dist-info folder on the path)."""
    plugin = tmp_path / "plugin"
    policy_folder(plugin / "ledger_migrations", LEDGER)
    (plugin / "ledger_policy.py").write_text(PLUGIN)
    policy_folder(
        plugin / "fairsched_ledger_policy-1.0.dist-info",
        {
            "METADATA": "Metadata-Version: 2.1\nName: fairsched-ledger-policy\nVersion: 1.0\n",
            "entry_points.txt": "[fairsched.policies]\nledger = ledger_policy:Ledger\n",
        },
    )
    monkeypatch.syspath_prepend(str(plugin))
    monkeypatch.delitem(sys.modules, "ledger_policy", raising=False)
    registry.cache_clear()
    yield
    registry.cache_clear()


def test_cli_policy_uninstall(ledger_installed: None, empty_db: str) -> None:
    migrated = cli(empty_db, "migrate")
    assert migrated.exit_code == 0, migrated.output
    assert "ledger:001_ledger_create, ledger:002_ledger_amount" in migrated.stdout
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("INSERT INTO fairsched.queues (name, policies) VALUES ('emails', '{fifo,ledger}')")
        refused = cli(empty_db, "policy", "uninstall", "ledger", "--yes")
        assert refused.exit_code == 1
        assert "queue emails: change its stack first with `fairsched policy set" in one_error_line(refused)
        conn.execute("UPDATE fairsched.queues SET policies = '{fifo}' WHERE name = 'emails'")
        declined = cli(empty_db, "policy", "uninstall", "ledger", input="n\n")
        assert declined.exit_code == 1
        assert "DROP TABLE fairsched.ledger;" in declined.stdout
        assert "will forget its migrations 001_ledger_create, 002_ledger_amount" in declined.stdout
        assert table_exists(conn, "fairsched.ledger")
        done = cli(empty_db, "policy", "uninstall", "ledger", input="y\n")
        assert done.exit_code == 0, done.output
        assert (
            "ran uninstall.sql, forgot its migrations (001_ledger_create, 002_ledger_amount)" in done.stdout
        )
        assert not table_exists(conn, "fairsched.ledger")
        assert recorded(conn, "ledger") == []
