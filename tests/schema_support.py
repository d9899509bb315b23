"""A normalised, schema-only dump of the ``fairsched`` schema, built from catalog queries.

No ``pg_dump`` is needed (the embedded server ships none). The dump is stable text to
review as a diff: objects sorted by name, columns in table order, no OIDs, no owner.
Privileges are listed per grantee, the owner's own left out, and a grantee holding
every privilege of the object's kind is shown as ``ALL``. Not-null constraints show as
their columns' ``NOT NULL`` only and statistics targets only where set, so the text
reads the same on PostgreSQL 15 and on the embedded server's later version.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row

from fairsched.db.migrate import load_migrations, migrations_dir

SCHEMA = "fairsched"

_RELATIONS = """
SELECT c.oid, c.relkind::text AS kind, c.oid::regclass::text AS name,
       c.relpersistence = 'u' AS unlogged, c.relreplident::text AS replica_identity,
       c.relrowsecurity AS row_security, c.relforcerowsecurity AS force_row_security,
       array(SELECT o FROM unnest(c.reloptions) AS o ORDER BY o) AS options,
       CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid, true) END AS view_definition,
       CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END AS partition_key,
       CASE WHEN c.relispartition THEN
           (SELECT i.inhparent::regclass::text FROM pg_inherits AS i WHERE i.inhrelid = c.oid)
           || ' ' || pg_get_expr(c.relpartbound, c.oid) END AS partition_of,
       obj_description(c.oid, 'pg_class') AS comment
  FROM pg_class AS c
 WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
 ORDER BY c.relname
"""

# Column options are n_distinct and n_distinct_inherited; options a server build keeps
# for itself under a pg_ prefix (no ALTER TABLE can set one) differ per install.
_COLUMNS = """
SELECT a.attrelid AS relation, quote_ident(a.attname) AS name, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null, a.attidentity::text AS identity, a.attgenerated::text AS generated,
       pg_get_expr(d.adbin, d.adrelid) AS default,
       CASE WHEN a.attcollation <> t.typcollation THEN a.attcollation::regcollation::text END AS collation,
       CASE WHEN a.attstorage <> t.typstorage THEN a.attstorage::text END AS storage,
       nullif(a.attcompression::text, '') AS compression,
       nullif(greatest(coalesce(a.attstattarget::int, -1), -1), -1) AS statistics,
       array(SELECT o FROM unnest(a.attoptions) AS o WHERE o NOT LIKE 'pg\\_%%' ORDER BY o) AS options,
       col_description(a.attrelid, a.attnum) AS comment
  FROM pg_attribute AS a
  JOIN pg_class AS c ON c.oid = a.attrelid
  JOIN pg_type AS t ON t.oid = a.atttypid
  LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
   AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attrelid, a.attnum
"""

# contype 'n': not-null constraints, in pg_constraint from PostgreSQL 18 on.
_CONSTRAINTS = """
SELECT k.conrelid AS relation, k.contypid AS type, k.conname AS name,
       pg_get_constraintdef(k.oid) AS definition, obj_description(k.oid, 'pg_constraint') AS comment
  FROM pg_constraint AS k
 WHERE k.connamespace = %(schema)s::regnamespace AND k.contype <> 'n'
 ORDER BY k.conname
"""

_INDEXES = """
SELECT i.indrelid AS relation, x.relname AS name, pg_get_indexdef(i.indexrelid) AS definition,
       obj_description(i.indexrelid, 'pg_class') AS comment
  FROM pg_index AS i
  JOIN pg_class AS x ON x.oid = i.indexrelid
 WHERE x.relnamespace = %(schema)s::regnamespace
 ORDER BY x.relname
"""

_TRIGGERS = """
SELECT g.tgrelid AS relation, g.tgname AS name, pg_get_triggerdef(g.oid) AS definition,
       g.tgenabled::text AS enabled, obj_description(g.oid, 'pg_trigger') AS comment
  FROM pg_trigger AS g
  JOIN pg_class AS c ON c.oid = g.tgrelid
 WHERE c.relnamespace = %(schema)s::regnamespace AND NOT g.tgisinternal
 ORDER BY g.tgname
"""

_POLICIES = """
SELECT p.polrelid AS relation, p.polname AS name, p.polpermissive AS permissive, p.polcmd::text AS command,
       array(SELECT CASE r WHEN 0 THEN 'PUBLIC' ELSE r::regrole::text END
               FROM unnest(p.polroles) AS r ORDER BY 1) AS roles,
       pg_get_expr(p.polqual, p.polrelid) AS using, pg_get_expr(p.polwithcheck, p.polrelid) AS check
  FROM pg_policy AS p
  JOIN pg_class AS c ON c.oid = p.polrelid
 WHERE c.relnamespace = %(schema)s::regnamespace
 ORDER BY p.polname
"""

_SEQUENCES = """
SELECT c.oid::regclass::text AS name, format_type(s.seqtypid, NULL) AS type, s.seqstart AS start,
       s.seqincrement AS increment, s.seqmin AS min, s.seqmax AS max, s.seqcache AS cache,
       s.seqcycle AS cycle,
       (SELECT d.refobjid::regclass::text || '.' || quote_ident(a.attname)
               || CASE d.deptype WHEN 'i' THEN ' (identity)' ELSE '' END
          FROM pg_depend AS d
          JOIN pg_attribute AS a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
         WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
           AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')) AS owned_by,
       obj_description(c.oid, 'pg_class') AS comment
  FROM pg_sequence AS s
  JOIN pg_class AS c ON c.oid = s.seqrelid
 WHERE c.relnamespace = %(schema)s::regnamespace
 ORDER BY c.relname
"""

_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature,
       CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END AS kind,
       CASE WHEN p.prokind <> 'a' THEN pg_get_functiondef(p.oid) END AS definition,
       obj_description(p.oid, 'pg_proc') AS comment
  FROM pg_proc AS p
 WHERE p.pronamespace = %(schema)s::regnamespace
 ORDER BY 1
"""

_TYPES = """
SELECT t.oid AS oid, t.oid::regtype::text AS name,
       CASE t.typtype WHEN 'd' THEN 'DOMAIN' WHEN 'e' THEN 'ENUM' WHEN 'r' THEN 'RANGE'
                      ELSE 'MULTIRANGE' END AS kind,
       CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) END AS base,
       t.typnotnull AS not_null, pg_get_expr(t.typdefaultbin, 0) AS default,
       array(SELECT quote_literal(e.enumlabel) FROM pg_enum AS e
              WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) AS labels,
       obj_description(t.oid, 'pg_type') AS comment
  FROM pg_type AS t
 WHERE t.typnamespace = %(schema)s::regnamespace AND t.typtype IN ('d', 'e', 'r', 'm')
 ORDER BY 2
"""

_STATISTICS = """
SELECT s.stxname AS name, pg_get_statisticsobjdef(s.oid) AS definition,
       obj_description(s.oid, 'pg_statistic_ext') AS comment
  FROM pg_statistic_ext AS s
 WHERE s.stxnamespace = %(schema)s::regnamespace
 ORDER BY s.stxname
"""

# Each privilege a grantee other than the owner holds on an object of the schema (a NULL
# ACL holds the defaults: PUBLIC may execute functions). `full`: every privilege of the
# object's kind on this server version (PostgreSQL 17 added MAINTAIN on tables).
_GRANTS = """
WITH objects (label, kind, owner, acl) AS (
    SELECT 'SCHEMA ' || quote_ident(n.nspname), 'n'::"char", n.nspowner, n.nspacl
      FROM pg_namespace AS n WHERE n.oid = %(schema)s::regnamespace
    UNION ALL
    SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END || c.oid::regclass::text,
           CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner, c.relacl
      FROM pg_class AS c
     WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
    UNION ALL
    SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE ' ELSE 'FUNCTION ' END || p.oid::regprocedure::text,
           'f'::"char", p.proowner, p.proacl
      FROM pg_proc AS p WHERE p.pronamespace = %(schema)s::regnamespace
    UNION ALL
    SELECT 'TYPE ' || t.oid::regtype::text, 'T'::"char", t.typowner, t.typacl
      FROM pg_type AS t
     WHERE t.typnamespace = %(schema)s::regnamespace AND t.typtype IN ('d', 'e', 'r', 'm')
)
SELECT o.label AS object, CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee,
       a.privilege_type AS privilege, a.is_grantable AS grantable,
       array(SELECT f.privilege_type FROM aclexplode(acldefault(o.kind, o.owner)) AS f
              WHERE f.grantee = o.owner ORDER BY 1) AS full
  FROM objects AS o, aclexplode(coalesce(o.acl, acldefault(o.kind, o.owner))) AS a
 WHERE a.grantee <> o.owner
"""

_COLUMN_GRANTS = """
SELECT c.oid::regclass::text AS relation, a.attnum AS number, quote_ident(a.attname) AS column,
       CASE x.grantee WHEN 0 THEN 'PUBLIC' ELSE x.grantee::regrole::text END AS grantee,
       x.privilege_type AS privilege, x.is_grantable AS grantable
  FROM pg_attribute AS a
  JOIN pg_class AS c ON c.oid = a.attrelid,
       aclexplode(a.attacl) AS x
 WHERE c.relnamespace = %(schema)s::regnamespace AND a.attacl IS NOT NULL AND NOT a.attisdropped
   AND x.grantee <> c.relowner
"""

# What objects created later in the schema are granted (ALTER DEFAULT PRIVILEGES IN
# SCHEMA), whichever role creates them.
_DEFAULT_GRANTS = """
SELECT CASE d.defaclobjtype WHEN 'r' THEN 'TABLES' WHEN 'S' THEN 'SEQUENCES' WHEN 'f' THEN 'FUNCTIONS'
                            WHEN 'T' THEN 'TYPES' ELSE 'SCHEMAS' END AS object,
       CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee,
       a.privilege_type AS privilege, a.is_grantable AS grantable,
       array(SELECT f.privilege_type
               FROM aclexplode(acldefault(CASE d.defaclobjtype WHEN 'S' THEN 's'
                                               ELSE d.defaclobjtype END, d.defaclrole)) AS f
              WHERE f.grantee = d.defaclrole ORDER BY 1) AS full
  FROM pg_default_acl AS d, aclexplode(d.defaclacl) AS a
 WHERE d.defaclnamespace = %(schema)s::regnamespace AND a.grantee <> d.defaclrole
"""

_ROLES = """
SELECT r.rolname AS name,
       concat_ws(' ', CASE WHEN r.rolcanlogin THEN 'LOGIN' ELSE 'NOLOGIN' END,
                 CASE WHEN r.rolsuper THEN 'SUPERUSER' END,
                 CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END,
                 CASE WHEN r.rolcreatedb THEN 'CREATEDB' END,
                 CASE WHEN r.rolreplication THEN 'REPLICATION' END,
                 CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' END,
                 CASE WHEN NOT r.rolinherit THEN 'NOINHERIT' END)
           AS attributes
  FROM pg_roles AS r
 WHERE r.rolname = ANY (%(roles)s)
 ORDER BY r.rolname
"""


def engine_release(folder: Path, last: str | None = None, *, without: str | None = None) -> Path:
    """``folder``, made to hold the engine's migrations up to ``last`` (a name such as
    ``011_operator_functions``; every one when ``None``): the release that ended with it,
    ``without`` one of them when given (a release that had every migration but that one)."""
    names = [m.name for m in load_migrations()]
    folder.mkdir(parents=True)
    for name in names[: names.index(last) + 1] if last is not None else names:
        if name != without:
            shutil.copyfile(migrations_dir() / f"{name}.sql", folder / f"{name}.sql")
    return folder


def schema_dump(conn: psycopg.Connection[Any], schema: str = SCHEMA) -> str:
    """The normalised catalog of ``schema``: its objects, privileges and comments, no rows."""
    params: dict[str, Any] = {"schema": schema}
    with conn.transaction(), conn.cursor(row_factory=namedtuple_row) as cur:
        # Every name outside pg_catalog comes out schema-qualified.
        cur.execute("SELECT set_config('search_path', 'pg_catalog', true)")

        def rows(query: str) -> list[Any]:
            return cur.execute(query, params).fetchall()

        catalog = {
            name: rows(query)
            for name, query in (
                ("relations", _RELATIONS),
                ("columns", _COLUMNS),
                ("constraints", _CONSTRAINTS),
                ("indexes", _INDEXES),
                ("triggers", _TRIGGERS),
                ("policies", _POLICIES),
                ("sequences", _SEQUENCES),
                ("functions", _FUNCTIONS),
                ("types", _TYPES),
                ("statistics", _STATISTICS),
                ("grants", _GRANTS),
                ("column_grants", _COLUMN_GRANTS),
                ("default_grants", _DEFAULT_GRANTS),
            )
        }
        grantees = {g.grantee for key in ("grants", "column_grants", "default_grants") for g in catalog[key]}
        params["roles"] = sorted(grantees - {"PUBLIC"})
        catalog["roles"] = rows(_ROLES)
        schema_comment = cur.execute(
            "SELECT obj_description(%(schema)s::regnamespace, 'pg_namespace') AS comment", params
        ).fetchone()
    return _Dump(schema, catalog).render(schema_comment.comment if schema_comment else None)


def _privileges(held: list[tuple[str, bool]], full: list[str]) -> str:
    """``SELECT, UPDATE``, or ``ALL`` when the grantee holds every privilege of the kind."""
    names = sorted({name for name, _ in held})
    text = "ALL" if len(full) > 1 and names == sorted(full) else ", ".join(names)
    grantable = sorted({name for name, option in held if option})
    if grantable:
        text += " (WITH GRANT OPTION: " + ", ".join(grantable) + ")"
    return text


def _comment(kind: str, target: str, text: str | None) -> list[str]:
    if text is None:
        return []
    return ["  COMMENT ON {} {} IS '{}'".format(kind, target, text.replace("'", "''"))]


class _Dump:
    """Renders the catalog rows of one schema, object by object."""

    def __init__(self, schema: str, catalog: dict[str, list[Any]]) -> None:
        self.schema = schema
        self.catalog = catalog
        self.grants: dict[str, dict[str, list[tuple[str, bool]]]] = defaultdict(lambda: defaultdict(list))
        self.full: dict[str, list[str]] = {}
        for g in catalog["grants"]:
            self.grants[g.object][g.grantee].append((g.privilege, g.grantable))
            self.full[g.object] = g.full

    def of(self, key: str, oid: int) -> list[Any]:
        """The rows of ``key`` that belong to the relation or type ``oid``."""
        return [row for row in self.catalog[key] if getattr(row, "relation", None) == oid]

    def grant_lines(self, label: str) -> list[str]:
        kind, _, name = label.partition(" ")
        return [
            f"  GRANT {_privileges(held, self.full[label])} ON {kind} {name} TO {grantee}"
            for grantee, held in sorted(self.grants.get(label, {}).items())
        ]

    def render(self, schema_comment: str | None) -> str:
        out = [f"SCHEMA {self.schema}", *self.grant_lines(f"SCHEMA {self.schema}")]
        out += _comment("SCHEMA", self.schema, schema_comment)
        for role in self.catalog["roles"]:
            out += ["", f"ROLE {role.name} {role.attributes}"]
        for t in self.catalog["types"]:
            out += ["", *self.type_lines(t)]
        for s in self.catalog["sequences"]:
            out += ["", *self.sequence_lines(s)]
        for r in self.catalog["relations"]:
            out += ["", *self.relation_lines(r)]
        for f in self.catalog["functions"]:
            out += ["", *(f.definition or f"AGGREGATE {f.signature}").rstrip().splitlines()]
            out += self.grant_lines(f"{'PROCEDURE' if f.kind == 'PROCEDURE' else 'FUNCTION'} {f.signature}")
            out += _comment(f.kind, f.signature, f.comment)
        for s in self.catalog["statistics"]:
            out += [
                "",
                f"STATISTICS {s.definition}",
                *_comment("STATISTICS", f"{self.schema}.{s.name}", s.comment),
            ]
        out += self.default_grant_lines()
        return "\n".join(out) + "\n"

    def type_lines(self, t: Any) -> list[str]:
        head = f"TYPE {t.name} {t.kind}"
        head += f" OVER {t.base}" if t.base else ""
        head += " NOT NULL" if t.not_null else ""
        head += f" DEFAULT {t.default}" if t.default else ""
        head += f" ({', '.join(t.labels)})" if t.labels else ""
        lines = [head]
        lines += [
            f"  CONSTRAINT {k.name} {k.definition}" for k in self.catalog["constraints"] if k.type == t.oid
        ]
        return lines + self.grant_lines(f"TYPE {t.name}") + _comment("TYPE", t.name, t.comment)

    def sequence_lines(self, s: Any) -> list[str]:
        lines = [
            f"SEQUENCE {s.name} AS {s.type} START {s.start} INCREMENT {s.increment} MINVALUE {s.min} "
            f"MAXVALUE {s.max} CACHE {s.cache}{' CYCLE' if s.cycle else ''}"
        ]
        if s.owned_by:
            lines.append(f"  OWNED BY {s.owned_by}")
        return lines + self.grant_lines(f"SEQUENCE {s.name}") + _comment("SEQUENCE", s.name, s.comment)

    def relation_lines(self, r: Any) -> list[str]:
        kind = {"v": "VIEW", "m": "MATERIALIZED VIEW", "f": "FOREIGN TABLE", "c": "TYPE"}.get(r.kind, "TABLE")
        lines = [f"{'UNLOGGED ' if r.unlogged else ''}{kind} {r.name}"]
        if r.partition_key:
            lines.append(f"  PARTITION BY {r.partition_key}")
        if r.partition_of:
            lines.append(f"  PARTITION OF {r.partition_of}")
        columns = self.of("columns", r.oid)
        lines += ["  COLUMN " + _column(c) for c in columns]
        if r.options:
            lines.append(f"  WITH ({', '.join(r.options)})")
        if r.kind in ("r", "p") and r.replica_identity != "d":
            lines.append(f"  REPLICA IDENTITY {r.replica_identity}")
        if r.row_security:
            lines.append("  ROW LEVEL SECURITY" + (" FORCED" if r.force_row_security else ""))
        if r.view_definition:
            lines += ["  AS", *("    " + line for line in r.view_definition.rstrip().splitlines())]
        for k in self.of("constraints", r.oid):
            lines += [
                f"  CONSTRAINT {k.name} {k.definition}",
                *_comment("CONSTRAINT", f"{k.name} ON {r.name}", k.comment),
            ]
        for i in self.of("indexes", r.oid):
            lines += [f"  INDEX {i.definition}", *_comment("INDEX", f"{self.schema}.{i.name}", i.comment)]
        for g in self.of("triggers", r.oid):
            state = {"O": "", "D": " DISABLED", "R": " ENABLE REPLICA", "A": " ENABLE ALWAYS"}[g.enabled]
            lines += [
                f"  TRIGGER {g.definition}{state}",
                *_comment("TRIGGER", f"{g.name} ON {r.name}", g.comment),
            ]
        for p in self.of("policies", r.oid):
            line = f"  POLICY {p.name} {'PERMISSIVE' if p.permissive else 'RESTRICTIVE'} FOR {p.command}"
            line += f" TO {', '.join(p.roles)}"
            line += f" USING ({p.using})" if p.using else ""
            line += f" WITH CHECK ({p.check})" if p.check else ""
            lines.append(line)
        lines += self.grant_lines(f"TABLE {r.name}")
        lines += self.column_grant_lines(r.name)
        lines += _comment(kind, r.name, r.comment)
        for c in columns:
            lines += _comment("COLUMN", f"{r.name}.{c.name}", c.comment)
        return lines

    def column_grant_lines(self, relation: str) -> list[str]:
        columns: dict[tuple[str, str, bool], list[tuple[int, str]]] = defaultdict(list)
        for g in self.catalog["column_grants"]:
            if g.relation == relation:
                columns[(g.grantee, g.privilege, g.grantable)].append((g.number, g.column))
        return [
            f"  GRANT {privilege} ({', '.join(c for _, c in sorted(cols))}) ON TABLE {relation} TO {grantee}"
            + (" WITH GRANT OPTION" if grantable else "")
            for (grantee, privilege, grantable), cols in sorted(columns.items())
        ]

    def default_grant_lines(self) -> list[str]:
        held: dict[tuple[str, str], list[tuple[str, bool]]] = defaultdict(list)
        full: dict[tuple[str, str], list[str]] = {}
        for g in self.catalog["default_grants"]:
            held[(g.object, g.grantee)].append((g.privilege, g.grantable))
            full[(g.object, g.grantee)] = g.full
        lines = [
            f"DEFAULT PRIVILEGES IN SCHEMA {self.schema} GRANT {_privileges(privileges, full[key])} "
            f"ON {key[0]} TO {key[1]}"
            for key, privileges in sorted(held.items())
        ]
        return ["", *lines] if lines else []


def _column(c: Any) -> str:
    text = f"{c.name} {c.type}"
    text += f" COLLATE {c.collation}" if c.collation else ""
    text += " NOT NULL" if c.not_null else ""
    if c.identity:
        text += " GENERATED " + ("ALWAYS" if c.identity == "a" else "BY DEFAULT") + " AS IDENTITY"
    elif c.generated:
        text += f" GENERATED ALWAYS AS ({c.default}) " + ("STORED" if c.generated == "s" else "VIRTUAL")
    elif c.default is not None:
        text += f" DEFAULT {c.default}"
    text += f" STORAGE {c.storage}" if c.storage else ""
    text += f" COMPRESSION {c.compression}" if c.compression else ""
    text += f" STATISTICS {c.statistics}" if c.statistics is not None else ""
    text += f" WITH ({', '.join(c.options)})" if c.options else ""
    return text
