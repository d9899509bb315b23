"""The schema the migrations build: reviewed as a diff of a checked-in snapshot, and the
same whether a database was migrated at once or one release at a time.

``tests/snapshots/schema.sql`` is the normalised catalog of a fresh install
(``schema_support.schema_dump``). A change to ``migrations/`` changes it: review the
diff, then regenerate it with ``FAIRSCHED_UPDATE_SNAPSHOTS=1 pytest tests/test_schema.py``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from database_support import database_copy
from schema_support import engine_release, schema_dump

from fairsched.db.migrate import load_migrations, migrate

SNAPSHOT = Path(__file__).resolve().parent.parent / "snapshots" / "schema.sql"


def unified_diff(expected: str, actual: str, expected_name: str, actual_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True), expected_name, actual_name
        )
    )


def applied_migrations(conn: psycopg.Connection) -> list[tuple[str, str, str]]:
    rows = conn.execute("SELECT version, name, checksum FROM fairsched.schema_migrations ORDER BY version")
    return [(str(v), str(n), str(c)) for v, n, c in rows.fetchall()]


@pytest.fixture
def another_empty_db(server_dsn: str) -> Iterator[str]:
    """A second database without the fairsched schema, beside ``empty_db``."""
    with database_copy(server_dsn) as dsn:
        yield dsn


def test_a_fresh_install_matches_the_schema_snapshot(empty_db: str) -> None:
    with psycopg.connect(empty_db, autocommit=True) as conn:
        migrate(conn)
        dump = schema_dump(conn)
    if os.environ.get("FAIRSCHED_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(dump)
    expected = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    if dump != expected:
        diff = unified_diff(expected, dump, "tests/snapshots/schema.sql", "fresh install")
        pytest.fail(
            f"the migrated schema differs from tests/snapshots/schema.sql:\n{diff}\n"
            "If the change is intended, review it and regenerate the snapshot:\n"
            "    FAIRSCHED_UPDATE_SNAPSHOTS=1 pytest tests/test_schema.py",
            pytrace=False,
        )


def test_migrating_one_release_at_a_time_equals_a_fresh_install(
    empty_db: str, another_empty_db: str, tmp_path: Path
) -> None:
    """Each prefix of the migrations is a release: a database upgraded through every one
    of them, each by its own ``migrate`` call on a new connection (a new process, as an
    upgrade runs), ends with the schema of a fresh install of them all."""
    migrations = load_migrations()
    assert migrations, "no migrations found"
    for migration in migrations:
        release = engine_release(tmp_path / migration.name, migration.name)
        with psycopg.connect(empty_db, autocommit=True) as conn:
            assert migrate(conn, release, policies={}) == [migration.name], f"upgrading to {migration.name}"
    with psycopg.connect(empty_db, autocommit=True) as conn:
        policies_applied = migrate(conn)
        assert policies_applied and all(":" in name for name in policies_applied), "then the policies'"
    with psycopg.connect(empty_db, autocommit=True) as conn:
        stepwise, stepwise_applied = schema_dump(conn), applied_migrations(conn)

    with psycopg.connect(another_empty_db, autocommit=True) as conn:
        assert migrate(conn) == [m.name for m in migrations] + policies_applied
        fresh, fresh_applied = schema_dump(conn), applied_migrations(conn)

    assert stepwise_applied == fresh_applied
    assert "TABLE fairsched.jobs" in fresh, "the dump reads the migrated schema"
    if stepwise != fresh:
        diff = unified_diff(fresh, stepwise, "fresh install", "one release at a time")
        pytest.fail(f"upgrading one release at a time builds another schema:\n{diff}", pytrace=False)
