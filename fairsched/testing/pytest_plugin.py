"""pytest fixtures for applications' tests: a migrated database of its own per test.

Registered under the ``pytest11`` entry point as ``fairsched``, so pytest loads it in any
environment where fairsched is installed (with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set,
pass ``-p fairsched.testing.pytest_plugin``). It defines fixtures and no hooks: nothing
happens until a test asks for one, and every name starts with ``fairsched_``.

- ``fairsched_server_dsn`` (session): the server, see :func:`fairsched.testing.databases.server_dsn`.
- ``fairsched_template`` (session): a database migrated once per session, dropped at its end.
- ``fairsched_dsn``: the DSN of this test's copy of the template, dropped after the test.
- ``fairsched_settings``: the settings of ``fairsched_client``; by default
  :func:`fairsched.load_settings` (``$FAIRSCHED_CONFIG`` and ``FAIRSCHED_*`` variables).
  Override it to declare the queues your tests need.
- ``fairsched_client``: a :class:`~fairsched.client.Client` on ``fairsched_dsn`` with the
  queues of ``fairsched_settings`` declared.
- ``fairsched_conn``: a connection to the same database (not autocommit, like an
  application's), rolled back and closed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from fairsched.client import Client
from fairsched.errors import DatabaseUnavailable
from fairsched.settings import Settings, load_settings
from fairsched.testing import databases


@pytest.fixture(scope="session")
def fairsched_server_dsn() -> str:
    """DSN of the server the test databases are made on."""
    try:
        return databases.server_dsn()
    except DatabaseUnavailable as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def fairsched_template(fairsched_server_dsn: str) -> Iterator[str]:
    """Name of a database migrated for this session, each test's starting point."""
    name = databases.template_create(fairsched_server_dsn)
    try:
        yield name
    finally:
        databases.database_drop(fairsched_server_dsn, name)


@pytest.fixture
def fairsched_dsn(fairsched_server_dsn: str, fairsched_template: str) -> Iterator[str]:
    """DSN of a migrated database of this test's own, dropped after it."""
    with databases.database_copy(fairsched_server_dsn, fairsched_template) as dsn:
        yield dsn


@pytest.fixture
def fairsched_settings() -> Settings:
    """Settings for ``fairsched_client``: override this fixture to declare your queues."""
    return load_settings()


@pytest.fixture
def fairsched_client(fairsched_dsn: str, fairsched_settings: Settings) -> Iterator[Client]:
    """A client on this test's database, the queues of ``fairsched_settings`` declared."""
    with Client(fairsched_dsn, settings=fairsched_settings) as client:
        client.apply_settings()
        yield client


@pytest.fixture
def fairsched_conn(fairsched_client: Client) -> Iterator[psycopg.Connection[Any]]:
    """A connection to ``fairsched_client``'s database, rolled back after the test."""
    conn = psycopg.connect(fairsched_client.dsn)
    try:
        yield conn
    finally:
        conn.close()  # what it did not commit is rolled back
