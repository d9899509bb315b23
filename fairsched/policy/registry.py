"""The policy registry (entry-point group ``fairsched.policies``) and each queue's stack,
read from the database and cached briefly."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

import psycopg

from fairsched import bounds
from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.errors import ConfigError, InvalidInput, UnknownQueue
from fairsched.policy.interface import GROUP, Policy, TenantOrder
from fairsched.policy.owned import caps_enforced, caps_refused


@lru_cache(maxsize=1)
def registry() -> Mapping[str, Policy]:
    """Every installed policy by name, loaded once from the entry points."""
    found: dict[str, Policy] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in found:
            continue
        loaded: Any = ep.load()
        policy = loaded() if isinstance(loaded, type) else loaded
        if not isinstance(policy, Policy):
            raise ConfigError(f"policy entry point {ep.name!r} ({ep.value}) does not implement Policy")
        if policy.name != ep.name:
            raise ConfigError(f"policy entry point {ep.name!r} loads a policy named {policy.name!r}")
        found[ep.name] = policy
    return found


def resolve(names: Sequence[str]) -> tuple[Policy, ...]:
    """The policies of a stack, in order; refuses unknown names and impossible stacks."""
    known = registry()
    missing = [name for name in names if name not in known]
    if missing:
        raise ConfigError(
            f"unknown polic{'ies' if len(missing) > 1 else 'y'} {', '.join(map(repr, missing))}; "
            f"installed: {', '.join(sorted(known))}"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"policy stack {list(names)} names a policy twice")
    stack = tuple(known[name] for name in names)
    if sum(p.tenant_order() is not None for p in stack) > 1:
        raise ConfigError(f"policy stack {list(names)} has more than one policy that orders tenants")
    if sum(p.admission() is not None for p in stack) > 1:
        raise ConfigError(f"policy stack {list(names)} has more than one policy that admits claims")
    return stack


def stack_tenant_order(names: Sequence[str]) -> TenantOrder | None:
    """The tenant order of a stack (of its one policy that orders tenants), or ``None``:
    its claims are then job-first."""
    return next((t for t in (p.tenant_order() for p in resolve(names)) if t is not None), None)


@dataclass(frozen=True)
class QueueStack:
    """A queue's policy stack as stored in the database, with its ``policy_params``."""

    queue: str
    names: tuple[str, ...]
    params: Mapping[str, Any]
    notify: bool

    @property
    def policies(self) -> tuple[Policy, ...]:
        return resolve(self.names)

    @property
    def tenant_ordered(self) -> bool:
        """A policy of the stack orders tenants: claims are tenant-first."""
        return stack_tenant_order(self.names) is not None

    @property
    def enforces_caps(self) -> bool:
        """The stack's tenant order keeps tenants within their caps (see
        :attr:`~fairsched.policy.TenantOrder.caps`): a cap is refused on any other stack."""
        return caps_enforced(self.names)

    @property
    def holds(self) -> bool:
        """A policy of the stack holds jobs of an aggregate back."""
        return any(p.holds for p in self.policies)


STACK_TTL_SECONDS = 1.0
"""How long a process reuses a queue's stack before reading it again."""

_stacks: dict[tuple[str, str], tuple[float, QueueStack]] = {}


def queue_stack(conn: psycopg.Connection, queue: str) -> QueueStack:
    """The queue's stack, read at most once per :data:`STACK_TTL_SECONDS` per database."""
    key = (_database_of(conn), queue)
    now = time.monotonic()
    cached = _stacks.get(key)
    if cached is not None and now - cached[0] < STACK_TTL_SECONDS:
        return cached[1]
    stack = _stack_read(conn, queue)
    _stacks[key] = (now, stack)
    return stack


def _stack_read(conn: psycopg.Connection, queue: str) -> QueueStack:
    """The queue's stack as the database holds it now."""
    with operation("queue_policy_get"):
        row = conn.execute(QUERIES["queue_policy_get"], {"name": queue}).fetchone()
    if row is None:
        raise UnknownQueue(queue)
    name, names, params, notify = row
    stack = QueueStack(name, tuple(names), params, notify)
    resolve(stack.names)
    return stack


def forget_stacks() -> None:
    """Drop every cached stack (after a local change of a queue's policies)."""
    _stacks.clear()


def _database_of(conn: psycopg.Connection) -> str:
    info = conn.info
    return f"{info.host}:{info.port}/{info.dbname}"


@dataclass(frozen=True)
class TenantShare:
    """A tenant's share state on one queue: weight, cap, running jobs, place in the order."""

    tenant: str
    weight: float
    cap: int | None
    running: int
    active: bool
    pass_: float
    claimed_total: int
    charged_total: float
    runtime_estimate: float


def tenant_share_set(
    conn: psycopg.Connection,
    queue: str,
    tenant: str,
    *,
    weight: float | None = None,
    cap: int | None = None,
    by: str = "api",
) -> None:
    """Set a tenant's weight and/or running cap on a queue (``cap=0`` removes the cap),
    recorded with ``by`` in ``fairsched.admin_events``.

    Takes effect on the next claim, for the queued backlog too. Ranges:
    :mod:`fairsched.bounds` (the database checks them too). A cap is refused on a queue
    whose stack enforces none (:attr:`QueueStack.enforces_caps`, read as it stands now);
    removing one is not.
    """
    if weight is not None:
        weight = bounds.number_checked("weight", weight, bounds.WEIGHT_MIN, bounds.WEIGHT_MAX)
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= bounds.CAP_MAX
    ):
        raise InvalidInput(f"cap must be an integer in [0, {bounds.CAP_MAX}] (0 removes it), got {cap!r}")
    stack = _stack_read(conn, queue) if cap else queue_stack(conn, queue)
    if cap and not stack.enforces_caps:
        raise caps_refused(queue, stack.names)
    with operation("tenant_share_set"):
        conn.execute(
            QUERIES["tenant_share_set"],
            {"queue": queue, "tenant": tenant, "weight": weight, "cap": cap, "by": by},
        )


def tenant_shares_list(conn: psycopg.Connection, queue: str) -> list[TenantShare]:
    """Every tenant's share state on ``queue``."""
    with operation("tenant_shares_list"):
        rows = conn.execute(QUERIES["tenant_shares_list"], {"queue": queue}).fetchall()
    return [TenantShare(*row) for row in rows]
