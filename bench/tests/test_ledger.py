"""The chaos ledger lives in the lab's own schema, never in the product's, and leaves with it."""

from __future__ import annotations

import psycopg

from bench.ledger import ledger_create, ledger_drop
from bench.sql import LAB_SCHEMA, QUERIES

RELATIONS = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s"
)


def relations(conn: psycopg.Connection, schema: str) -> set[str]:
    return {name for (name,) in conn.execute(RELATIONS, (schema,)).fetchall()}


def test_the_ledger_is_made_in_the_lab_schema_and_dropped_with_it(fresh_db: str) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        product = relations(conn, "fairsched")
        ledger_create(conn, reset=True)
        ledger_create(conn, reset=True)  # again, as every soak does: nothing fails, nothing added
        assert {"ledger", "ledger_deaths", "ledger_pauses"} <= relations(conn, LAB_SCHEMA)
        assert relations(conn, "fairsched") == product, "nothing of the lab in the product's schema"
        ledger_drop(conn)
        assert conn.execute("SELECT to_regnamespace(%s)", (LAB_SCHEMA,)).fetchone() == (None,)
        assert relations(conn, "fairsched") == product


def test_dropping_the_ledger_keeps_the_lab_schema_while_the_probe_uses_it(fresh_db: str) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(QUERIES["commit_probe_install"])
        ledger_create(conn)
        ledger_drop(conn)
        assert relations(conn, LAB_SCHEMA) == {"probe_commits", "probe_commits_pkey"}
