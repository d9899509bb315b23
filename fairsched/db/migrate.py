"""Apply the ordered plain-SQL files of ``migrations/``, then each installed policy's own,
each file in one transaction; uninstall a policy's schema.

An advisory lock serialises concurrent runs; an applied file whose checksum changed is
refused, and so is a recorded file the code no longer ships. The engine's files are
recorded in ``fairsched.schema_migrations``, a policy's in ``fairsched.policy_migrations``
by policy and version.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

import psycopg
from psycopg import sql

from fairsched.db.connection import operation
from fairsched.errors import InvalidInput, MigrationError

_LOCK_KEY = 0x6661697273636864  # "fairschd"
_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
UNINSTALL = "uninstall.sql"
"""A policy's undo script, beside its migrations: run by ``fairsched policy uninstall``."""

_SCHEMA_MIGRATIONS = """CREATE TABLE IF NOT EXISTS fairsched.schema_migrations (
    version text PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())"""
_POLICY_MIGRATIONS = """CREATE TABLE IF NOT EXISTS fairsched.policy_migrations (
    policy text NOT NULL,
    version text NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (policy, version))"""

PolicyFolders = Mapping[str, Traversable | None]
"""Each policy's migrations folder by policy name (``None``: the policy ships none)."""


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


def load_migrations(folder: Traversable | None = None) -> list[Migration]:
    """All migration files of ``folder`` (the engine's by default), in version order;
    ``uninstall.sql`` is not a migration."""
    folder = folder or migrations_dir()
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql") or entry.name == UNINSTALL or not entry.is_file():
            continue
        match = _NAME.match(entry.name)
        if not match:
            raise MigrationError(f"{folder}/{entry.name}: migration files are named NNN_what_it_does.sql")
        found.append(Migration(match.group(1), entry.name.removesuffix(".sql"), entry.read_text("utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"{folder}: two migrations share a version number")
    return found


def installed_policy_migrations() -> dict[str, Traversable | None]:
    """Every installed policy's migrations folder, by name (from the policy registry)."""
    from fairsched.policy.registry import registry

    return {name: policy.migrations() for name, policy in registry().items()}


def migrate(
    conn: psycopg.Connection, folder: Traversable | None = None, *, policies: PolicyFolders | None = None
) -> list[str]:
    """Apply pending migrations on an autocommit connection: the engine's, then each
    policy's (``policies``; every installed one by default) in name order. Returns the
    names applied, a policy's as ``"policy:NNN_name"``.

    Recorded migrations of a policy that is no longer installed are left alone.
    """
    engine = load_migrations(folder)
    folders = installed_policy_migrations() if policies is None else policies
    owned = {name: load_migrations(f) if f is not None else [] for name, f in sorted(folders.items())}
    with operation("migrate"), _migration_lock(conn):
        with conn.transaction():
            conn.execute("CREATE SCHEMA IF NOT EXISTS fairsched")
            conn.execute(_SCHEMA_MIGRATIONS)
        applied = _apply(conn, [(None, m) for m in _pending(conn, None, engine)])
        with conn.transaction():  # after the engine's: a fresh install equals an upgraded one
            conn.execute(_POLICY_MIGRATIONS)
        return applied + _apply(conn, [(p, m) for p, ms in owned.items() for m in _pending(conn, p, ms)])


def _apply(conn: psycopg.Connection, pending: list[tuple[str | None, Migration]]) -> list[str]:
    """Apply each migration with its record in one transaction; the names applied."""
    for policy, migration in pending:
        with conn.transaction():
            conn.execute(sql.SQL(migration.sql))
            _record(conn, policy, migration)
    return [m.name if policy is None else f"{policy}:{m.name}" for policy, m in pending]


@contextmanager
def _migration_lock(conn: psycopg.Connection) -> Iterator[None]:
    """The session-level advisory lock every schema change of fairsched runs under."""
    conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))


def _recorded(conn: psycopg.Connection, policy: str | None) -> dict[str, tuple[str, str]]:
    """The recorded migrations (the engine's when ``policy`` is None): version -> (name, checksum)."""
    if policy is None:
        rows = conn.execute("SELECT version, name, checksum FROM fairsched.schema_migrations").fetchall()
    else:
        rows = conn.execute(
            "SELECT version, name, checksum FROM fairsched.policy_migrations WHERE policy = %s", (policy,)
        ).fetchall()
    return {version: (name, checksum) for version, name, checksum in rows}


def _pending(conn: psycopg.Connection, policy: str | None, migrations: list[Migration]) -> list[Migration]:
    """The migrations not applied yet; refuses an edited applied file and a recorded
    version that is not shipped any more."""
    done = _recorded(conn, policy)
    owner = "" if policy is None else f"policy {policy!r}: "
    for migration in migrations:
        if migration.version in done and done[migration.version][1] != migration.checksum:
            raise MigrationError(
                f"{owner}migration {migration.name} was applied as {done[migration.version][0]} with "
                "a different checksum: applied migrations must not be edited; add a new migration instead"
            )
    unknown = sorted(set(done) - {m.version for m in migrations})
    if unknown:
        if policy is None:
            raise MigrationError(
                f"the database has migrations this fairsched does not know ({', '.join(unknown)}): "
                "upgrade fairsched"
            )
        raise MigrationError(
            f"{owner}the database has migrations the installed policy does not ship "
            f"({', '.join(done[v][0] for v in unknown)}): upgrade the policy package"
        )
    return [m for m in migrations if m.version not in done]


def _record(conn: psycopg.Connection, policy: str | None, migration: Migration) -> None:
    if policy is None:
        conn.execute(
            "INSERT INTO fairsched.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
            (migration.version, migration.name, migration.checksum),
        )
    else:
        conn.execute(
            "INSERT INTO fairsched.policy_migrations (policy, version, name, checksum) "
            "VALUES (%s, %s, %s, %s)",
            (policy, migration.version, migration.name, migration.checksum),
        )


# -- uninstalling a policy -------------------------------------------------------------


@dataclass(frozen=True)
class PolicyUninstall:
    """What uninstalling a policy drops: its recorded migrations, and the installed
    policy's ``uninstall.sql`` when it ships one."""

    policy: str
    migrations: tuple[str, ...]
    script: str | None


def policy_uninstall_plan(
    conn: psycopg.Connection, name: str, *, policies: PolicyFolders | None = None
) -> PolicyUninstall:
    """What :func:`policy_uninstall` would do now, refused as it would be."""
    with operation("policy_uninstall_plan"), conn.transaction():
        return _uninstall_plan(conn, name, policies)


def policy_uninstall(
    conn: psycopg.Connection, name: str, *, policies: PolicyFolders | None = None
) -> PolicyUninstall:
    """Drop a policy's schema on an autocommit connection, under the migration lock and
    in one transaction: run its ``uninstall.sql`` and forget its recorded migrations.

    Refused while a queue's stack names the policy, for an installed policy whose
    migrations come without an ``uninstall.sql`` (its schema stays), and for a policy that
    is neither installed (``policies``; every installed one by default) nor recorded.
    """
    with operation("policy_uninstall"), _migration_lock(conn), conn.transaction():
        conn.execute("LOCK TABLE fairsched.queues IN SHARE MODE")  # no stack may name it meanwhile
        plan = _uninstall_plan(conn, name, policies)
        if plan.script is not None:
            conn.execute(sql.SQL(plan.script))
        conn.execute("DELETE FROM fairsched.policy_migrations WHERE policy = %s", (name,))
    return plan


def _uninstall_plan(conn: psycopg.Connection, name: str, policies: PolicyFolders | None) -> PolicyUninstall:
    folders = installed_policy_migrations() if policies is None else policies
    folder = folders.get(name)
    script = folder.joinpath(UNINSTALL) if folder is not None else None
    if script is not None and not script.is_file():
        raise MigrationError(
            f"policy {name!r} ships migrations but no {UNINSTALL}, so its schema stays: taking it out of "
            "every queue's stack (`fairsched policy set QUEUE --policies ...`) is how to stop using it"
        )
    queues = [
        q
        for (q,) in conn.execute(
            "SELECT name FROM fairsched.queues WHERE %s = ANY (policies) ORDER BY name", (name,)
        )
    ]
    if queues:
        many = len(queues) > 1
        raise MigrationError(
            f"policy {name!r} is in the stack of queue{'s' if many else ''} {', '.join(queues)}: "
            f"change {'their stacks' if many else 'its stack'} first with "
            "`fairsched policy set QUEUE --policies ...`"
        )
    recorded = conn.execute(
        "SELECT name FROM fairsched.policy_migrations WHERE policy = %s ORDER BY version", (name,)
    ).fetchall()
    if name not in folders and not recorded:
        raise InvalidInput(
            f"unknown policy {name!r}: it is not installed and the database records no migrations of it"
        )
    text = script.read_text("utf-8") if script is not None else None
    return PolicyUninstall(name, tuple(n for (n,) in recorded), text)
