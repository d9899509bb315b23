"""The admin audit trail: every weight or cap change records who made it and the values
after, from the API, the command line and (tests/web) the dashboard; a bad ``by`` is
refused and changes nothing."""

from __future__ import annotations

import psycopg
import pytest
from cli_support import cli
from policies_support import declare

from fairsched import Client
from fairsched.errors import InvalidInput


def _events(db: psycopg.Connection) -> list[tuple[object, ...]]:
    rows = db.execute("SELECT by, action, queue_name, tenant, detail FROM fairsched.admin_events ORDER BY id")
    return rows.fetchall()


def test_weight_and_cap_changes_name_who_made_them(
    client: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    declare(client, "w", ["weighted"])
    client.set_tenant_share("w", "acme", weight=3, by="ops:ana")
    assert cli(fresh_db, "tenant", "cap", "w", "acme", "5").exit_code == 0
    assert _events(db) == [
        ("ops:ana", "tenant_share", "w", "acme", {"weight": 3.0, "cap": None}),
        ("cli", "tenant_share", "w", "acme", {"weight": 3.0, "cap": 5}),
    ]


def test_a_bad_by_is_refused_and_changes_nothing(client: Client, db: psycopg.Connection) -> None:
    declare(client, "w", ["weighted"])
    with pytest.raises(InvalidInput, match="by must be a non-empty string"):
        client.set_tenant_share("w", "acme", weight=3, by="")
    assert _events(db) == []
    assert db.execute("SELECT count(*) FROM fairsched.tenant_shares").fetchone() == (0,)
