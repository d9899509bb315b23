"""Stack functions: a policy stack's claim and dry-tenant sweep, run as the schema owner.

Workers hold no right to write a table (``migrations/008_roles.sql``). The statements a
queue's stack composes (:mod:`fairsched.engine.composer`) are therefore installed as
``SECURITY DEFINER`` functions, one per stack and shape, named after the digest of what
they run: ``fairsched.stack_claim_<digest>`` and ``fairsched.stack_dry_<digest>``. Each
checks that the queue it is called for has its stack. Applying the configuration
installs the functions of every stack it writes (:func:`stack_functions_install`); a
claim installs a missing one itself when its session may (the admin, the owner), and
otherwise fails with one error saying how to install it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

import psycopg
from psycopg import sql

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.composer import compose_claim, stack_filters
from fairsched.errors import DatabaseError
from fairsched.policy.registry import resolve

_CLAIM_PARAMETERS = (
    ("%(queue)s", "$1"),
    ("%(owner)s", "$2"),
    ("%(limit)s", "$3"),
    ("%(lease_seconds)s", "$4"),
)
_DRY_PARAMETERS = (("%(queue)s", "$1"), ("%(limit)s", "$2"), ("%(tenants)s", "dry_tenants"))


@dataclass(frozen=True)
class StackFunction:
    """One installed function of a stack: its name, kind, stack, the statements it runs,
    and the statement that calls it."""

    name: str
    kind: str
    stack: tuple[str, ...]
    bodies: tuple[str, ...]
    call: sql.Composed


@lru_cache(maxsize=256)
def claim_function(names: tuple[str, ...], *, single: bool) -> StackFunction:
    """The function that runs a stack's claim statement (the ``single`` shape: limit 1)."""
    body = _bind(compose_claim(names, single=single).as_string(None), _CLAIM_PARAMETERS)
    return _function(
        "claim",
        names,
        (body,),
        "SELECT * FROM {}(%(queue)s, %(owner)s, %(limit)s, %(lease_seconds)s::float8)",
    )


@lru_cache(maxsize=128)
def dry_function(names: tuple[str, ...]) -> StackFunction:
    """The function that takes a stack's dry tenants out of its tenant order."""
    order = next(t for t in (p.tenant_order() for p in resolve(names)) if t is not None)
    filters = stack_filters(names)
    bodies = tuple(
        _bind(sql.SQL(statement).format(filters=filters).as_string(None), _DRY_PARAMETERS)
        for statement in (order.dry_lock, order.dry_deactivate)
    )
    return _function("dry", names, bodies, "SELECT * FROM {}(%(queue)s, %(limit)s)")


def _bind(statement: str, parameters: tuple[tuple[str, str], ...]) -> str:
    """The statement with its parameters bound to the function's, without comment lines."""
    statement = "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("--"))
    for placeholder, argument in parameters:
        statement = statement.replace(placeholder, argument)
    if "%(" in statement:
        raise ValueError(f"a stack statement takes a parameter a stack function does not: {statement!r}")
    return statement


def _function(kind: str, names: tuple[str, ...], bodies: tuple[str, ...], call: str) -> StackFunction:
    digest = hashlib.sha256("\0".join((kind, *names, *bodies)).encode()).hexdigest()[:16]
    name = f"stack_{kind}_{digest}"
    return StackFunction(name, kind, names, bodies, sql.SQL(call).format(sql.Identifier("fairsched", name)))


_INSTALLED: set[tuple[str, str]] = set()
"""(database, function) pairs seen installed by this process."""


def stack_function_ready(conn: psycopg.Connection, function: StackFunction) -> sql.Composed:
    """The statement that calls ``function``, installed first when it is missing."""
    info = conn.info
    key = (f"{info.host}:{info.port}/{info.dbname}", function.name)
    if key in _INSTALLED:
        return function.call
    with operation("stack_function_exists"):
        row = conn.execute(QUERIES["stack_function_exists"], {"name": function.name}).fetchone()
    if not (row and row[0]):
        try:
            _install(conn, function)
        except DatabaseError as error:
            if "permission denied" not in str(error):
                raise
            raise DatabaseError(
                f"permission denied: the {function.kind} of policy stack {' + '.join(function.stack)} "
                "is not installed, and this role may not install it: run `fairsched config apply` "
                "(or declare the queue) as the schema owner or a member of fairsched_admin"
            ) from error
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        _INSTALLED.add(key)  # else it may exist only in a transaction that rolls back
    return function.call


def _install(conn: psycopg.Connection, function: StackFunction) -> None:
    params = {
        "name": function.name,
        "kind": function.kind,
        "stack": list(function.stack),
        "bodies": list(function.bodies),
    }
    with operation("stack_function_install"), conn.transaction():
        conn.execute(QUERIES["stack_function_install"], params)


def stack_functions_install(
    conn: psycopg.Connection, names: tuple[str, ...], *, tenant_ordered: bool
) -> None:
    """Install a stack's claim functions (both shapes) and, when it orders tenants, its
    dry-tenant sweep: run where the configuration is applied."""
    functions = [claim_function(names, single=False), claim_function(names, single=True)]
    if tenant_ordered:
        functions.append(dry_function(names))
    for function in functions:
        stack_function_ready(conn, function)
