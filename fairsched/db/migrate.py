"""Apply the ordered plain-SQL files of ``migrations/``, each in one transaction.

An advisory lock serialises concurrent runs; an applied file whose checksum
changed is refused.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from fairsched.db.connection import operation
from fairsched.errors import MigrationError

_LOCK_KEY = 0x6661697273636864  # "fairschd"
_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def migrations_dir() -> Path:
    """The migrations folder: the repository's in a checkout, the packaged copy otherwise."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent.parent / "migrations", here / "migrations"):
        if candidate.is_dir():
            return candidate
    raise MigrationError("migrations folder not found; reinstall fairsched")


def load_migrations(folder: Path | None = None) -> list[Migration]:
    """All migration files, in version order."""
    folder = folder or migrations_dir()
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise MigrationError(f"{path}: migration files are named NNN_what_it_does.sql")
        found.append(Migration(match.group(1), path.stem, path.read_text("utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"{folder}: two migrations share a version number")
    return found


def migrate(conn: psycopg.Connection, folder: Path | None = None) -> list[str]:
    """Apply pending migrations on an autocommit connection; returns the names applied."""
    migrations = load_migrations(folder)
    applied_now: list[str] = []
    with operation("migrate"):
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            with conn.transaction():
                conn.execute("CREATE SCHEMA IF NOT EXISTS fairsched")
                conn.execute(
                    """CREATE TABLE IF NOT EXISTS fairsched.schema_migrations (
                           version text PRIMARY KEY,
                           name text NOT NULL,
                           checksum text NOT NULL,
                           applied_at timestamptz NOT NULL DEFAULT now())"""
                )
            rows = conn.execute("SELECT version, name, checksum FROM fairsched.schema_migrations").fetchall()
            done = {version: (name, checksum) for version, name, checksum in rows}
            for migration in migrations:
                if migration.version in done:
                    name, checksum = done[migration.version]
                    if checksum != migration.checksum:
                        raise MigrationError(
                            f"migration {migration.name} was applied as {name} with a "
                            "different checksum: applied migrations must not be edited; "
                            "add a new migration instead"
                        )
                    continue
                with conn.transaction():
                    conn.execute(sql.SQL(migration.sql))
                    conn.execute(
                        "INSERT INTO fairsched.schema_migrations (version, name, checksum) "
                        "VALUES (%s, %s, %s)",
                        (migration.version, migration.name, migration.checksum),
                    )
                applied_now.append(migration.name)
            unknown = sorted(set(done) - {m.version for m in migrations})
            if unknown:
                raise MigrationError(
                    f"the database has migrations this fairsched does not know ({', '.join(unknown)}): "
                    "upgrade fairsched"
                )
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return applied_now
