"""The built-in policies ``serial`` and ``weighted`` own their state: their first migrations
adopt what the engine's migrations created, as it stands after ``011_operator_functions``.

Applied there, the adoption changes no definition, owner or grant, and adds only the
comments naming the owner; the files define exactly what they adopt (drop it, run them,
and the schema is back); they wait for no lock a claim or an enqueue holds; and the
adopted state stays on ``fairsched policy uninstall``.
"""

from __future__ import annotations

from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_support import cli, one_error_line
from fairsched_policies.serial import Serial
from fairsched_policies.weighted import Weighted
from psycopg import sql
from psycopg.rows import namedtuple_row
from schema_support import engine_release, schema_dump

from fairsched.db.migrate import load_migrations, migrate, policy_uninstall
from fairsched.errors import MigrationError

ADOPTED_AT = "011_operator_functions"
"""The engine's last migration that created state of these policies."""

BUILT_INS: dict[str, Traversable | None] = {p.name: p.migrations() for p in (Serial(), Weighted())}

OWNED = {
    "serial": [
        "column serial of table fairsched.jobs",
        "column serial_gap of table fairsched.queues",
        "column serial_poison of table fairsched.queues",
        "function fairsched.aggregate_skip(text,text,text,text)",
        "function fairsched.aggregate_unblock(text,text,text,text)",
        "function fairsched.aggregates_advance(text[],text[],text[])",
        "function fairsched.aggregates_finish(bigint[])",
        "function fairsched.aggregates_lock(text,text[],text[],bigint[])",
        "index fairsched.jobs_aggregate_head_idx",
        "index fairsched.jobs_aggregate_seq_idx",
        "index fairsched.jobs_aggregate_waiting_idx",
        "table fairsched.aggregates",
    ],
    "weighted": [
        "column charge of table fairsched.queues",
        "column tenant_cap of table fairsched.queues",
        "function fairsched.pass_floors_lower()",
        "function fairsched.pass_floors_refresh(text)",
        "function fairsched.tenant_released(text,text)",
        "function fairsched.tenant_share_set(text,text,double precision,integer,text)",
        "function fairsched.tenant_shares_activate(text,text[],timestamp with time zone[])",
        "function fairsched.tenant_shares_finish(bigint[])",
        "function fairsched.tenant_shares_finish(bigint[],text[],text[])",
        "function fairsched.tenant_shares_floor(text)",
        "function fairsched.tenant_shares_settle(bigint[])",
        "function fairsched.tenant_shares_wake(integer)",
        "table fairsched.pass_floors",
        "table fairsched.tenant_releases",
        "table fairsched.tenant_shares",
    ],
}
"""What each policy owns: its objects carry the comment ``<policy> policy: defined by its migrations``."""

_OWNERS = """
SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid) AS object, i.type, i.identity,
       substring(d.description FROM '^(\\w+) policy: defined by its migrations') AS policy
  FROM pg_description AS d
 CROSS JOIN LATERAL pg_identify_object(d.classoid, d.objoid, d.objsubid) AS i
 WHERE i.schema = 'fairsched'
 ORDER BY 1
"""

_FUNCTIONS = """
SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proowner::regrole::text, p.proacl::text
  FROM pg_proc AS p
 WHERE p.pronamespace = 'fairsched'::regnamespace
"""


def owners(conn: psycopg.Connection) -> list[Any]:
    """Each commented object of the schema: its description, type, identity and owning policy."""
    with conn.cursor(row_factory=namedtuple_row) as cur:
        return cur.execute(_OWNERS).fetchall()


def functions(conn: psycopg.Connection) -> dict[str, tuple[str, str, str | None]]:
    """Every function of the schema: its definition, owner and grants, by signature."""
    return {sig: (definition, owner, acl) for sig, definition, owner, acl in conn.execute(_FUNCTIONS)}


def without_ownership_comments(dump: str) -> str:
    return "".join(
        line for line in dump.splitlines(keepends=True) if " policy: defined by its migrations" not in line
    )


def adoptions(folder: Path) -> dict[str, Traversable | None]:
    """The built-ins' adopting migrations (each one's first) copied alone into ``folder``:
    the adoption, without what their later migrations change."""
    found: dict[str, Traversable | None] = {}
    for name, source in BUILT_INS.items():
        assert source is not None
        first = min(f.name for f in source.iterdir() if f.name[:3].isdigit() and f.name.endswith(".sql"))
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / first).write_text(source.joinpath(first).read_text("utf-8"), "utf-8")
        found[name] = folder / name
    return found


def adopt(conn: psycopg.Connection, release: Path) -> list[str]:
    """Migrate to ``release``, then apply the built-ins' adopting migrations only."""
    return migrate(conn, release, policies=adoptions(release.parent / "adoptions"))


@pytest.mark.parametrize("built", ["at once", "one release at a time"])
def test_the_adoption_changes_no_definition_owner_or_grant(built: str, empty_db: str, tmp_path: Path) -> None:
    """pg_get_functiondef, owner and ACL of every function, and the whole schema but for
    the new comments, are the same before and after the adoption."""
    migrations = [m.name for m in load_migrations()]
    steps = migrations[: migrations.index(ADOPTED_AT) + 1]
    with psycopg.connect(empty_db, autocommit=True) as conn:
        for last in steps if built == "one release at a time" else steps[-1:]:
            migrate(conn, engine_release(tmp_path / last, last), policies={})
        before, before_dump = functions(conn), schema_dump(conn)
        assert owners(conn) == [], "the engine's release comments nothing"

        applied = adopt(conn, tmp_path / ADOPTED_AT)
        assert applied == ["serial:001_adopt_aggregates", "weighted:001_adopt_shares"]
        after, after_dump = functions(conn), schema_dump(conn)
        owned = owners(conn)

    adopted = [o.object.removeprefix("function ") for o in owned if o.type == "function"]
    assert adopted and set(adopted) <= set(before), "each adopted function existed before"
    changed = sorted(sig for sig in before.keys() | after.keys() if before.get(sig) != after.get(sig))
    assert changed == [], f"the adoption changed {changed}"
    assert without_ownership_comments(after_dump) == before_dump
    assert {p: sorted(o.object for o in owned if o.policy == p) for p in OWNED} == OWNED
    assert all(o.policy in OWNED for o in owned), owned


def _drop(owned: Any) -> sql.Composed:
    """The statement dropping an owned object (with what depends on it)."""
    if owned.type == "table column":
        table, _, column = owned.identity.rpartition(".")
        return sql.SQL("ALTER TABLE {} DROP COLUMN {} CASCADE").format(sql.SQL(table), sql.SQL(column))
    kind = {"table": "TABLE", "function": "FUNCTION", "index": "INDEX"}[owned.type]
    return sql.SQL("DROP {} IF EXISTS {} CASCADE").format(sql.SQL(kind), sql.SQL(owned.identity))


def _columns_unordered(dump: str) -> str:
    """``dump`` with the queues table's lines sorted: a column added again comes last."""
    blocks = dump.split("\n\n")
    return "\n\n".join(
        "\n".join(sorted(b.splitlines())) if b.startswith("TABLE fairsched.queues\n") else b for b in blocks
    )


def test_the_policies_files_rebuild_what_they_own(fresh_db: str) -> None:
    """Everything the two policies own, dropped, comes back the same from their migrations:
    the files are the definitions, not notes beside them. (The jobs' serial column stays:
    the engine's role blocks grant the jobs' columns.)"""
    with psycopg.connect(fresh_db) as conn:
        before = schema_dump(conn)
        owned = [o for o in owners(conn) if o.policy in OWNED]
        assert len(owned) == sum(map(len, OWNED.values()))
        for o in owned:
            if o.identity != "fairsched.jobs.serial":
                conn.execute(_drop(o))
        assert "TABLE fairsched.tenant_shares" not in schema_dump(conn)
        for folder in BUILT_INS.values():
            assert folder is not None
            for migration in load_migrations(folder):
                conn.execute(sql.SQL(migration.sql))
        rebuilt = schema_dump(conn)
        conn.rollback()
    assert _columns_unordered(rebuilt) == _columns_unordered(before)


def test_the_adoption_waits_for_no_lock_that_claims_and_enqueues_hold(empty_db: str, tmp_path: Path) -> None:
    """Claims, enqueues and settling keep working while the adoption runs: it takes no lock
    on the tables they write (ADD COLUMN and CREATE INDEX would, even IF NOT EXISTS)."""
    release = engine_release(tmp_path / ADOPTED_AT, ADOPTED_AT)
    with psycopg.connect(empty_db, autocommit=True) as conn, psycopg.connect(empty_db) as busy:
        migrate(conn, release, policies={})
        busy.execute(
            "LOCK TABLE fairsched.jobs, fairsched.queues, fairsched.tenant_shares, fairsched.tenant_releases,"
            " fairsched.pass_floors, fairsched.aggregates IN ROW EXCLUSIVE MODE"
        )
        conn.execute("SET lock_timeout = '2s'")
        assert len(adopt(conn, release)) == 2


def test_the_built_ins_state_stays_on_uninstall(fresh_db: str) -> None:
    """They ship no uninstall.sql: the engine uses their state (its enqueue writes
    jobs.serial, its reports read shares and aggregates), so uninstalling them is refused
    and nothing is forgotten."""
    records = "SELECT policy, version FROM fairsched.policy_migrations ORDER BY policy, version"
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        recorded = conn.execute(records).fetchall()
        assert {policy for policy, _ in recorded} >= set(BUILT_INS)
        for policy in BUILT_INS:
            with pytest.raises(MigrationError, match=f"^policy '{policy}' ships migrations but no uninstall"):
                policy_uninstall(conn, policy)
        refused = cli(fresh_db, "policy", "uninstall", "serial", "--yes")
        assert refused.exit_code == 1
        assert "so its schema stays: taking it out of every queue's stack" in one_error_line(refused)
        assert conn.execute(records).fetchall() == recorded
        assert conn.execute("SELECT to_regclass('fairsched.aggregates') IS NOT NULL").fetchone() == (True,)
