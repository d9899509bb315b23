"""Stack functions: a policy stack's claim, dry-tenant sweep, enqueue and completion, run
as the schema owner.

Producers and workers hold no right to write a table (``migrations/008_roles.sql``). The
statements a queue's stack composes (:mod:`fairsched.engine.composer`,
:mod:`fairsched.engine.stackstatements`) are therefore installed as ``SECURITY DEFINER``
functions, one per stack and shape, named after the digest of what they run:
``fairsched.stack_claim_<digest>``, ``stack_dry_``, ``stack_enqueue_`` and
``stack_complete_`` (``migrations/014_stack_enqueue_complete.sql``). Each but the
completion (fenced by the leases it is given) checks that the queue it is called for
has its stack. Applying the configuration
installs the functions of every stack it writes (:func:`stack_functions_install`); a
claim installs a missing one itself when its session may (the admin, the owner), and
otherwise fails with one error saying how to install it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache

import psycopg
from psycopg import sql

from fairsched.db.connection import idle, operation
from fairsched.db.sql import QUERIES
from fairsched.engine.composer import compose_claim, stack_filters
from fairsched.engine.stackstatements import compose_complete, compose_enqueue
from fairsched.errors import ConfigError, DatabaseError
from fairsched.policy.registry import resolve, stack_tenant_order

_CLAIM_PARAMETERS = (
    ("%(queue)s", "$1"),
    ("%(owner)s", "$2"),
    ("%(limit)s", "$3"),
    ("%(lease_seconds)s", "$4"),
)
_DRY_PARAMETERS = (("%(queue)s", "$1"), ("%(limit)s", "$2"), ("%(tenants)s", "dry_tenants"))
_ENQUEUE_PARAMETERS = tuple(
    (f"%({name})s", f"${n}")
    for n, name in enumerate(
        (
            "queue",
            "tenants",
            "payloads",
            "priorities",
            "aggregate_keys",
            "aggregate_seqs",
            "run_ats",
            "max_attempts",
            "idempotency_keys",
            "activate",
            "trace_context",
        ),
        start=1,
    )
)
_COMPLETE_PARAMETERS = (("%(owner)s", "$1"), ("%(ids)s", "$2"), ("%(tokens)s", "$3"))


@dataclass(frozen=True)
class StackFunction:
    """One installed function of a stack: its name, kind, stack, the statements it runs,
    and the statement that calls it."""

    name: str
    kind: str
    stack: tuple[str, ...]
    bodies: tuple[str, ...]
    call: sql.Composed = field(compare=False)


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
    order = stack_tenant_order(names)
    if order is None:
        raise ValueError(f"policy stack {list(names)} orders no tenants: it has no dry-tenant sweep")
    filters = stack_filters(names)
    bodies = tuple(
        _bind(sql.SQL(statement).format(filters=filters).as_string(None), _DRY_PARAMETERS)
        for statement in (order.dry_lock, order.dry_deactivate)
    )
    return _function("dry", names, bodies, "SELECT * FROM {}(%(queue)s, %(limit)s)")


@lru_cache(maxsize=128)
def enqueue_function(names: tuple[str, ...]) -> StackFunction:
    """The function that inserts a batch on a queue of the stack."""
    body = _bind(compose_enqueue(names), _ENQUEUE_PARAMETERS)
    return _function(
        "enqueue",
        names,
        (body,),
        "SELECT * FROM {}(%(queue)s, %(tenants)s::text[], %(payloads)s::jsonb[], %(priorities)s::int[], "
        "%(aggregate_keys)s::text[], %(aggregate_seqs)s::bigint[], %(run_ats)s::timestamptz[], "
        "%(max_attempts)s::int[], %(idempotency_keys)s::text[], %(activate)s::bool, "
        "%(trace_context)s::jsonb)",
    )


@lru_cache(maxsize=128)
def complete_function(names: tuple[str, ...]) -> StackFunction | None:
    """The function that completes leases of the stack's queues, when its tenant order
    settles at completion (``None``: the engine's ``fairsched.leases_complete``)."""
    statement = compose_complete(names)
    if statement is None:
        return None
    body = _bind(statement, _COMPLETE_PARAMETERS)
    call = "SELECT id FROM {}(%(owner)s, %(ids)b::bigint[], %(tokens)b::bigint[])"
    return _function("complete", names, (body,), call)


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


STACK_CHANGED = "does not have the policy stack"
"""What a stack function's refusal says when the queue's stack is another one (it changed
since the caller read it)."""

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
    if idle(conn):
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


def stack_functions_install(conn: psycopg.Connection, names: tuple[str, ...]) -> None:
    """Install a stack's functions: its claims (both shapes), its enqueue, its completion
    when it has one and, when it orders tenants, its dry-tenant sweep; run where the
    configuration is applied."""
    functions = [
        claim_function(names, single=False),
        claim_function(names, single=True),
        enqueue_function(names),
    ]
    complete = complete_function(names)
    if complete is not None:
        functions.append(complete)
    if stack_tenant_order(names) is not None:
        functions.append(dry_function(names))
    for function in functions:
        stack_function_ready(conn, function)


def stored_stacks_install(conn: psycopg.Connection) -> None:
    """Install the functions of every stack the stored queues have (after an upgrade
    changed what a stack composes); stacks naming a policy that is not installed are
    left alone."""
    with operation("queue_stacks_list"):
        rows = conn.execute(QUERIES["queue_stacks_list"]).fetchall()
    for (names,) in rows:
        try:
            resolve(names)
        except ConfigError:
            continue
        stack_functions_install(conn, tuple(names))
