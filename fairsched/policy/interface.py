"""The policy plug-in interface: what a policy may shape in the claim, and its hooks.

A policy shapes the claim of every queue whose stack names it. It may

- **order tenants** (``orders_tenants``): the claim then picks tenants by their
  virtual time first (stride scheduling, the engine's ``tenant_shares`` state)
  and jobs within each tenant second;
- **order jobs** (``job_order``): the index-backed sort of claimable jobs,
  within a tenant when a policy orders tenants, else across the queue;
- **restrict claimability** (``claim_filter``): a predicate over the candidate
  row ``j`` of ``fairsched.jobs``; it must not need a sort or a join;
- **hold jobs back** (``serial``): jobs of one aggregate wait outside the claim
  index until their predecessor finished (the engine's ``aggregates`` state);
- **keep its own state** at enqueue, claim and completion (``on_enqueue``,
  ``on_claim``, ``on_finish``), each called inside the transition's transaction.

The composer (:mod:`fairsched.engine.composer`) turns a queue's stack into one statement;
the last policy of the stack that gives a job order wins, filters add up.

"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import psycopg
from psycopg import sql

GROUP = "fairsched.policies"
"""The entry-point group policies are installed under."""

OrderColumn = Literal["priority", "available_at", "aging_key", "id"]


@dataclass(frozen=True)
class OrderTerm:
    """One sort key of the claim: a job column the claim indexes cover, and its direction."""

    column: OrderColumn
    descending: bool = False


@runtime_checkable
class Policy(Protocol):
    """A fairness policy. Implementations are stateless; state lives in the database."""

    name: str
    """The name a queue's ``policies`` list uses."""
    orders_tenants: bool
    """Claims pick the tenant with the lowest virtual time first (weighted fair share)."""
    serial: bool
    """Jobs of one ``(queue, tenant, aggregate_key)`` run one at a time in sequence order."""

    def job_order(self) -> Sequence[OrderTerm] | None:
        """The order of claimable jobs, or ``None`` to keep the stack's order."""
        ...

    def claim_filter(self) -> sql.Composable | None:
        """A predicate over the candidate row ``j``, or ``None``."""
        ...

    def on_enqueue(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        """Called after jobs were inserted, in the enqueuing transaction."""
        ...

    def on_claim(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        """Called after a claim leased jobs (not called for empty claims)."""
        ...

    def on_finish(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        """Called after jobs left ``running`` (succeeded, failed, released, recovered)."""
        ...


class BasePolicy:
    """Defaults for every hook: subclass it and override what the policy needs."""

    name: str = ""
    orders_tenants: bool = False
    serial: bool = False

    def job_order(self) -> Sequence[OrderTerm] | None:
        return None

    def claim_filter(self) -> sql.Composable | None:
        return None

    def on_enqueue(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None

    def on_claim(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None

    def on_finish(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None
