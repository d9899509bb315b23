"""The policy plug-in interface: the extension points of the claim, and the hooks.

A policy shapes the claim of every queue whose stack names it, through these
extension points (each ``None`` when the policy does not use it):

- **order tenants** (:meth:`Policy.tenant_order`): the claim picks tenants first,
  by a key the policy keeps, gives each a number of jobs, and scans each chosen
  tenant's jobs second ("choose tenants, then claim within each tenant");
- **order jobs** (:meth:`Policy.job_order`): the index-backed sort of claimable
  jobs, within a tenant when a policy orders tenants, else across the queue;
- **filter candidates** (:meth:`Policy.claim_filter`): a predicate over the
  candidate row ``j`` of ``fairsched.jobs``; it must not need a sort or a join;
- **admit against a per-tenant budget** (:meth:`Policy.admission`): tenants out
  of budget are passed over, and a claim takes no more of a tenant's jobs than its
  budget admits, charged under a lock in the claim's transaction;
- **hold jobs back** (``serial``): jobs of one aggregate wait outside the claim
  index until their predecessor finished (the engine's ``aggregates`` state);
- **keep its own schema** (:meth:`Policy.migrations`): ``NNN_what.sql`` files that
  ``fairsched migrate`` applies with the engine's, recorded by policy and version;
- **keep its own state** at enqueue, claim and completion (``on_enqueue``,
  ``on_claim``, ``on_finish``): enqueue's and finish's hooks run inside the
  transition's transaction, the claim's right after the claim committed.

Every SQL fragment may read the statement's parameters ``%(queue)s`` and ``%(limit)s``
and the claim's queue CTE ``q``, whose ``params`` is the queue's ``policy_params``
(jsonb): a filter reads it as ``(SELECT q.params ->> 'key' FROM q)``. A literal ``%`` is
written ``%%``. The composer (:mod:`fairsched.engine.composer`) turns a queue's stack
into one statement; the last policy of the stack that gives a job order wins,
filters add up, at most one policy orders tenants and at most one admits.
See ``docs/writing-policies.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
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


@dataclass(frozen=True)
class TenantOrder:
    """The tenant half of a tenant-first claim, as SQL templates the composer fills in.

    - ``queue`` (and ``queue_one``, for a claim of one job): columns, each followed by
      a comma, that the ``q`` CTE adds from the queue row ``qs``; ``joins``: what it
      joins to ``qs`` to read them;
    - ``tenants``: the body of the ``tenants`` CTE, at most ``%(limit)s`` rows with
      ``tenant`` and ``room`` (jobs it may take), each row's tenant named ``t.tenant``;
      it ends its ``FROM`` with ``{admit_join}`` and its ``WHERE`` with
      ``{admit_filter}``, and passes ``{admit_room}`` as the last argument of the
      ``least(...)`` that bounds ``room`` (the composer fills them from the stack's
      admission, or with nothing);
    - ``quota`` (and ``quota_one``, for a claim of one job): ``(tenant, n)`` rows,
      how many jobs each chosen tenant gets;
    - ``charge`` (and ``charge_one``): the statement's tail after the ``candidate``
      CTE of ``(id, tenant)`` rows, beginning with ``),``: it moves the candidates it
      admits with ``{set_running}``, returns ``{returning}`` and keeps the policy's
      state, in one statement.
    """

    queue: str
    queue_one: str
    joins: str
    tenants: str
    quota: str
    quota_one: str
    charge: str
    charge_one: str


@dataclass(frozen=True)
class Admission:
    """A per-tenant budget, as two database functions the policy's migrations create.

    - ``budget(queue text, tenant text) RETURNS float8``: how many jobs the tenant
      may start now (``NULL``: no limit). The claim calls it once per candidate tenant
      (tenant-first) or per scanned job (job-first), passes over tenants whose budget is
      below 1 and, tenant-first, gives a tenant no more room than its budget. It may lock
      what ``admit`` will charge, with ``SKIP LOCKED`` (returning 0 when another claim
      holds it), so concurrent claims do not count on the same budget.
    - ``admit(queue text, tenants text[], wanted int[]) RETURNS TABLE (tenant text,
      admitted int)``: called once per claim with the candidates counted per tenant
      (tenants in ascending order); it locks what it charges, in that order, charges
      what it admits and returns the tenants it limits (others are admitted whole).
    """

    budget: sql.Identifier
    admit: sql.Identifier


@runtime_checkable
class Policy(Protocol):
    """A fairness policy. Implementations are stateless; state lives in the database."""

    name: str
    """The name a queue's ``policies`` list uses."""
    serial: bool
    """Jobs of one ``(queue, tenant, aggregate_key)`` run one at a time in sequence order."""

    def migrations(self) -> Traversable | None:
        """A folder of ``NNN_what.sql`` files that create and upgrade the policy's state."""
        ...

    def tenant_order(self) -> TenantOrder | None:
        """The tenant half of the claim, or ``None`` when the policy does not order tenants."""
        ...

    def job_order(self) -> Sequence[OrderTerm] | None:
        """The order of claimable jobs, or ``None`` to keep the stack's order."""
        ...

    def claim_filter(self) -> sql.Composable | None:
        """A predicate over the candidate row ``j``, or ``None``."""
        ...

    def admission(self) -> Admission | None:
        """The per-tenant budget claims are admitted against, or ``None``."""
        ...

    def on_enqueue(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        """Called after jobs were inserted, in the enqueuing transaction."""
        ...

    def on_claim(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        """Called after a claim leased jobs and committed (not called for empty claims)."""
        ...

    def on_finish(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        """Called after jobs left ``running`` (succeeded, failed, released, recovered)."""
        ...


class BasePolicy:
    """Defaults for every extension point and hook: subclass it and override what the
    policy needs."""

    name: str = ""
    serial: bool = False

    def migrations(self) -> Traversable | None:
        return None

    def tenant_order(self) -> TenantOrder | None:
        return None

    def job_order(self) -> Sequence[OrderTerm] | None:
        return None

    def claim_filter(self) -> sql.Composable | None:
        return None

    def admission(self) -> Admission | None:
        return None

    def on_enqueue(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None

    def on_claim(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None

    def on_finish(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None
