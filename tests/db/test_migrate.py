"""Migrations: applied once each, concurrently safe, refused when an applied file changed."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from cli_support import cli, one_error_line
from psycopg import sql

from fairsched.db.migrate import load_migrations, migrate
from fairsched.errors import DatabaseError, MigrationError
from tests.conftest import STALE_TEMPLATE_SECONDS, stale_templates_drop, template_stamp, with_database


def applied(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT version, name FROM fairsched.schema_migrations ORDER BY version")
        return [(str(v), str(n)) for v, n in rows.fetchall()]


def write_migrations(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_migrate_applies_every_file_once_then_is_a_no_op(empty_db: str) -> None:
    names = [m.name for m in load_migrations()]
    with psycopg.connect(empty_db, autocommit=True) as conn:
        assert migrate(conn, policies={}) == names
        assert migrate(conn, policies={}) == []
    assert [name for _, name in applied(empty_db)] == names


def test_two_processes_migrating_at_once_both_succeed(empty_db: str, tmp_path: Path) -> None:
    """The second process waits on the advisory lock, then finds nothing to do."""
    folder = write_migrations(
        tmp_path / "migrations",
        {
            "001_first.sql": "CREATE TABLE fairsched.first (id int); SELECT pg_sleep(1);",
            "002_second.sql": "CREATE TABLE fairsched.second (id int);",
        },
    )
    script = (
        "import sys, psycopg; from pathlib import Path; from fairsched.db.migrate import migrate\n"
        "with psycopg.connect(sys.argv[1], autocommit=True) as c:\n"
        "    print(','.join(migrate(c, Path(sys.argv[2]), policies={})))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, empty_db, str(folder)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert sorted(out.strip() for out, _ in outputs) == ["", "001_first,002_second"]
    assert applied(empty_db) == [("001", "001_first"), ("002", "002_second")]


def test_two_cli_migrations_at_once(empty_db: str) -> None:
    command = [sys.executable, "-m", "fairsched.cli.main", "migrate"]
    env = {"FAIRSCHED_DATABASE_URL": empty_db, "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert len(applied(empty_db)) == len(load_migrations())


def test_an_edited_applied_migration_is_refused(empty_db: str, tmp_path: Path) -> None:
    folder = write_migrations(tmp_path / "m", {"001_first.sql": "CREATE TABLE fairsched.first (id int);"})
    with psycopg.connect(empty_db, autocommit=True) as conn:
        migrate(conn, folder, policies={})
        write_migrations(
            folder,
            {
                "001_first.sql": "CREATE TABLE fairsched.first (id bigint);",
                "002_second.sql": "CREATE TABLE fairsched.second (id int);",
            },
        )
        with pytest.raises(MigrationError, match=r"001_first .* different checksum"):
            migrate(conn, folder, policies={})
    assert applied(empty_db) == [("001", "001_first")]


def test_cli_refuses_a_changed_checksum(empty_db: str) -> None:
    assert cli(empty_db, "migrate").exit_code == 0
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("UPDATE fairsched.schema_migrations SET checksum = 'edited' WHERE version = '001'")
    result = cli(empty_db, "migrate")
    assert result.exit_code == 1
    assert "applied migrations must not be edited" in one_error_line(result)


def test_a_database_newer_than_the_code_is_refused(empty_db: str) -> None:
    assert cli(empty_db, "migrate").exit_code == 0
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO fairsched.schema_migrations (version, name, checksum) "
            "VALUES ('999', '999_future', 'x')"
        )
    result = cli(empty_db, "migrate")
    assert result.exit_code == 1
    assert "does not know (999)" in one_error_line(result)


def test_a_failing_migration_leaves_no_trace_of_itself(empty_db: str, tmp_path: Path) -> None:
    folder = write_migrations(
        tmp_path / "m",
        {
            "001_first.sql": "CREATE TABLE fairsched.first (id int);",
            "002_broken.sql": "CREATE TABLE fairsched.half (id int); SELECT * FROM no_such_table;",
        },
    )
    with psycopg.connect(empty_db, autocommit=True) as conn:
        with pytest.raises(DatabaseError):
            migrate(conn, folder)
        assert conn.execute("SELECT to_regclass('fairsched.half')").fetchone() == (None,)
        assert conn.execute("SELECT to_regclass('fairsched.first')").fetchone() == ("fairsched.first",)
    assert applied(empty_db) == [("001", "001_first")]


def test_badly_named_migration_files_are_refused(tmp_path: Path) -> None:
    folder = write_migrations(tmp_path / "m", {"1_first.sql": "SELECT 1;"})
    with pytest.raises(MigrationError, match=r"NNN_what_it_does\.sql"):
        load_migrations(folder)


def test_test_templates_of_other_migrations_are_dropped_unless_in_use(
    server_dsn: str, template_db: str
) -> None:
    """The test fixtures keep one migrated template per server: the one of these
    migrations. Others go when a new one is built once they are old (or unstamped); a
    recent one (another checkout's test run may be using it) and one still open stay."""
    stale, old, recent, busy = (f"fairsched_tpl_{uuid.uuid4().hex[:12]}" for _ in range(4))
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in (stale, old, recent, busy):
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        template_stamp(admin, old, built_at=time.time() - STALE_TEMPLATE_SECONDS - 60)
        template_stamp(admin, recent)
        try:
            with psycopg.connect(with_database(server_dsn, busy)):
                stale_templates_drop(admin, keep=template_db)
            left = {
                name
                for (name,) in admin.execute(
                    "SELECT datname FROM pg_database WHERE datname = ANY (%s)",
                    ([stale, old, recent, busy, template_db],),
                )
            }
            assert left == {recent, busy, template_db}
        finally:
            for name in (recent, busy):
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
