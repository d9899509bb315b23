"""The Django example of docs/async.md, with Django configured on the test database."""

from __future__ import annotations

from collections.abc import Iterator

import django
import django.db
import psycopg
import pytest
from django import conf
from django_orders import place_order
from psycopg.conninfo import conninfo_to_dict

from fairsched import Client, QueueSettings


@pytest.fixture
def django_db(fresh_db: str) -> Iterator[None]:
    """Django's ``default`` database is the test database, on the psycopg 3 backend."""
    params = conninfo_to_dict(fresh_db)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params["dbname"],
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
    }
    if not conf.settings.configured:
        conf.settings.configure(DATABASES={"default": database}, USE_TZ=True)
        django.setup()
    django.db.connections.close_all()
    django.db.connections["default"].settings_dict.update(database)  # the next use opens it
    yield
    django.db.connections.close_all()


def test_a_receipt_job_commits_or_rolls_back_with_the_order(
    django_db: None, fresh_db: str, db: psycopg.Connection
) -> None:
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, email text NOT NULL)")
    with Client(fresh_db) as client:
        client.declare_queue("receipts", QueueSettings())
        job_id = place_order(client, 1, "ann@example.com", "acme")
        with pytest.raises(django.db.IntegrityError):
            place_order(client, 1, "bo@example.com", "acme")
    assert django.db.connections["default"].connection is not None
    assert isinstance(django.db.connections["default"].connection, psycopg.Connection)
    assert db.execute("SELECT id, payload FROM fairsched.jobs").fetchall() == [(job_id, {"order": 1})]
