"""The policy plug-in interface: the extension points of the claim, and the hooks.

A policy shapes the claim of every queue whose stack names it, through these
extension points (each ``None`` when the policy does not use it):

- **order tenants** (:meth:`Policy.tenant_order`): the claim picks tenants first,
  by a key the policy keeps, gives each a number of jobs, and scans each chosen
  tenant's jobs second ("choose tenants, then claim within each tenant");
- **order jobs** (:meth:`Policy.job_order`): the index-backed sort of claimable
  jobs, within a tenant when a policy orders tenants, else across the queue; with a
  claim head (:meth:`Policy.claim_head`) its scans start past the dead entries;
- **filter candidates** (:meth:`Policy.claim_filter`): a predicate over the
  candidate row ``j`` of ``fairsched.jobs``; it must not need a sort or a join;
- **admit against a per-tenant budget** (:meth:`Policy.admission`): tenants out
  of budget are passed over, and a claim takes no more of a tenant's jobs than its
  budget admits, charged under a lock in the claim's transaction;
- **hold jobs back** (:attr:`Policy.holds`, :meth:`Policy.hold`): jobs with an
  aggregate key are inserted ``waiting``, outside every claim index, and the policy's
  :meth:`~Policy.settle` makes them ``pending`` when their turn comes;
- **keep state in step with transitions** (:meth:`Policy.settle`,
  :meth:`Policy.pending`, :meth:`Policy.sweep`): called in the transaction of every
  transition that moves jobs (enqueue of held jobs, completion, failure, release,
  recovery, cancel, replay), with the jobs as they stand after it; and with a queue's
  settings (:meth:`Policy.reconfigured`);
- **own settings and report throttling** (:meth:`Policy.settings`,
  :meth:`Policy.throttle`): values per queue or tenant that config, CLI and API set,
  and a level that tells the reports a tenant is held back, not starving;
- **fill its columns at enqueue** (:meth:`Policy.enqueue_columns`): a job column its
  migrations own and the value the insert gives it, in the insert's own statement;
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
from datetime import datetime
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import psycopg
from psycopg import sql

from fairsched.policy.settings import Setting, Throttle

if TYPE_CHECKING:
    from fairsched.engine.enqueue import JobSpec

GROUP = "fairsched.policies"
"""The entry-point group policies are installed under."""


@dataclass(frozen=True)
class OrderTerm:
    """One sort key of the claim: a column of ``fairsched.jobs`` an index covers (the
    engine's ``priority``, ``available_at``, ``id``, or one the policy's migrations add
    and index), and its direction."""

    column: str
    descending: bool = False


@dataclass(frozen=True)
class EnqueueColumn:
    """A column of ``fairsched.jobs`` the policy's migrations own, and the value enqueue
    inserts in it: SQL over the batch row ``i`` (``tenant``, ``payload``, ``priority``,
    ``aggregate_key``, ``aggregate_seq``, ``run_at``, ``max_attempts``,
    ``idempotency_key``; ``NULL`` where not given) and the queue's row ``q`` of
    ``fairsched.queues``, e.g. ``extract(epoch FROM now()) - i.priority * 60``.
    It runs in the stack's enqueue function, as the schema owner."""

    column: str
    value: str


@dataclass(frozen=True)
class ClaimHead:
    """Where claims in a job order start their index scan, past the dead index entries
    earlier claims left: a key at or below every pending job's key in that order, kept in
    ``fairsched.claim_heads`` (see ``docs/claim-design.md``). The policy's migrations add
    its columns and a trigger that lowers them whenever jobs become pending.

    - ``columns``: the head's columns of ``fairsched.claim_heads`` (one per order term),
      each with the SQL value it holds when unset (below every key: it bounds nothing);
    - ``behind``: a statement returning the queues (``queue_name``) whose head sits below
      their lowest pending key (read-only: what a refresh would raise);
    - ``refresh``: a statement raising one queue's head (``%(queue)s``) to its lowest
      pending key, returning one boolean row (false: skipped, a transaction that makes
      jobs pending holds it).

    A tenant order's floor (:attr:`TenantOrder.floor`) is kept the same way, without
    columns: the tenant order reads it itself.
    """

    columns: tuple[tuple[str, str], ...]
    behind: str
    refresh: str


@dataclass(frozen=True)
class TenantOrder:
    """The tenant half of a tenant-first claim, as SQL templates the composer fills in.

    - ``queue`` (and ``queue_one``, for a claim of one job): columns, each preceded by
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
      state, in one statement;
    - ``dry_lock`` and ``dry_deactivate``: after a claim came back short, the first
      locks (``SKIP LOCKED``) and returns tenants the order would choose that have
      nothing claimable (``{filters}``: the stack's filters over ``j``, which may read
      ``q.params``); the second, given them as ``%(tenants)s``, takes them out of the
      order. Both run in the stack's dry function, as the schema owner.

    ``floor``: where the tenant scan starts, kept like a claim head (``None``: none).

    ``activate``: a function ``activate(queue text, tenants text[], due timestamptz[])``
    the policy's migrations create, called in the insert's own statement with the tenants
    of an enqueued batch and when each job is due (``-infinity``: now), so that they join
    the order with their jobs. Otherwise a tenant order learns of tenants that got
    pending jobs through :meth:`Policy.pending` (retries, promotions, replays; and at
    enqueue, when the batch holds jobs back or the order has no ``activate``).

    ``finish``: a function ``finish(ids bigint[], queues text[], tenants text[])`` the
    policy's migrations create, called in a completion's own statement with the completed
    jobs whose claim the order counted (the charge set their ``share_counted``).
    Otherwise completions reach the order through :meth:`Policy.settle`.

    ``caps``: the order keeps each tenant within its cap of running jobs (a tenant's
    ``cap``). A stack enforces caps exactly when its tenant order does: a cap is refused
    on a queue whose stack does not, at every entry.
    """

    queue: str
    queue_one: str
    joins: str
    tenants: str
    quota: str
    quota_one: str
    charge: str
    charge_one: str
    dry_lock: str
    dry_deactivate: str
    floor: ClaimHead | None = None
    activate: sql.Identifier | None = None
    finish: sql.Identifier | None = None
    caps: bool = False


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


@dataclass(frozen=True)
class JobState:
    """A job a transition moved, as it stands after the move."""

    id: int
    tenant: str
    status: str
    aggregate_key: str | None
    available_at: datetime


Pending = tuple[str, datetime]
"""A job that became pending: its tenant and when it is due."""


@runtime_checkable
class Policy(Protocol):
    """A fairness policy. Implementations are stateless; state lives in the database."""

    name: str
    """The name a queue's ``policies`` list uses."""
    holds: bool
    """Jobs with an aggregate key are inserted ``waiting`` (held back) until the policy's
    :meth:`settle` makes them ``pending``."""

    def migrations(self) -> Traversable | None:
        """A folder of ``NNN_what.sql`` files that create and upgrade the policy's state."""
        ...

    def tenant_order(self) -> TenantOrder | None:
        """The tenant half of the claim, or ``None`` when the policy does not order tenants."""
        ...

    def job_order(self) -> Sequence[OrderTerm] | None:
        """The order of claimable jobs, or ``None`` to keep the stack's order."""
        ...

    def claim_head(self) -> ClaimHead | None:
        """The claim head of the policy's :meth:`job_order`, or ``None`` (scans of its order
        then start at the low end of the index; the default order has the engine's head)."""
        ...

    def claim_filter(self) -> sql.Composable | None:
        """A predicate over the candidate row ``j``, or ``None``."""
        ...

    def enqueue_columns(self) -> Sequence[EnqueueColumn]:
        """The job columns the policy fills at enqueue (:class:`EnqueueColumn`), none by default."""
        ...

    def admission(self) -> Admission | None:
        """The per-tenant budget claims are admitted against, or ``None``."""
        ...

    def hold(self, conn: psycopg.Connection, queue: str, jobs: Sequence[JobSpec]) -> None:
        """Before a batch with held jobs is inserted, in the enqueuing transaction (a policy
        that :attr:`holds` only): lock and check what they need; raise
        :class:`~fairsched.errors.InvalidInput` to refuse the batch."""
        ...

    def settles(self, *, held: bool, tenant_order_settled: bool) -> bool:
        """Whether jobs of a queue leaving ``running`` need :meth:`settle` (``held``: some
        were held jobs; ``tenant_order_settled``: the transition's own statement settled
        what the tenant order counted at claim, as a completion does)."""
        ...

    def settle(
        self,
        conn: psycopg.Connection,
        queue: str,
        jobs: Sequence[JobState],
        *,
        left_running: bool,
        tenant_order_settled: bool,
    ) -> Sequence[Pending]:
        """Keep the policy's state in step after a transition moved ``jobs`` (held jobs
        inserted, jobs that left ``running`` when ``left_running``, cancelled or replayed
        ones), in its transaction; returns the jobs it made pending."""
        ...

    def pending(self, conn: psycopg.Connection, queue: str, jobs: Sequence[Pending]) -> None:
        """Jobs became pending (retried, promoted, replayed), in the transition's
        transaction. Enqueue calls it only with held jobs in the batch; otherwise a tenant
        order's ``activate`` runs in the insert's own statement."""
        ...

    def sweep(self, conn: psycopg.Connection, *, batch: int) -> int:
        """Periodic upkeep, run by the sweeper after each recovery pass (autocommit, at
        most ``batch`` rows); returns how many rows it changed."""
        ...

    def reconfigured(self, conn: psycopg.Connection, queue: str, changed: frozenset[str]) -> int:
        """A queue's stored settings ``changed`` (their names), committed: bring what the
        policy keeps per job in line with them, in short transactions of its own (``conn``
        is not in one). Called on every installed policy; returns the jobs it changed."""
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

    def settings(self) -> Sequence[Setting]:
        """The settings the policy owns (:class:`Setting`), none by default."""
        ...

    def throttle(self) -> Throttle | None:
        """How reports tell a tenant the policy holds back now, or ``None``."""
        ...


class BasePolicy:
    """Defaults for every extension point and hook: subclass it and override what the
    policy needs."""

    name: str = ""
    holds: bool = False

    def migrations(self) -> Traversable | None:
        return None

    def tenant_order(self) -> TenantOrder | None:
        return None

    def job_order(self) -> Sequence[OrderTerm] | None:
        return None

    def claim_head(self) -> ClaimHead | None:
        return None

    def claim_filter(self) -> sql.Composable | None:
        return None

    def enqueue_columns(self) -> Sequence[EnqueueColumn]:
        return ()

    def admission(self) -> Admission | None:
        return None

    def hold(self, conn: psycopg.Connection, queue: str, jobs: Sequence[JobSpec]) -> None:
        return None

    def settles(self, *, held: bool, tenant_order_settled: bool) -> bool:
        return False

    def settle(
        self,
        conn: psycopg.Connection,
        queue: str,
        jobs: Sequence[JobState],
        *,
        left_running: bool,
        tenant_order_settled: bool,
    ) -> Sequence[Pending]:
        return ()

    def pending(self, conn: psycopg.Connection, queue: str, jobs: Sequence[Pending]) -> None:
        return None

    def sweep(self, conn: psycopg.Connection, *, batch: int) -> int:
        return 0

    def reconfigured(self, conn: psycopg.Connection, queue: str, changed: frozenset[str]) -> int:
        return 0

    def on_enqueue(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None

    def on_claim(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None

    def on_finish(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        return None

    def settings(self) -> Sequence[Setting]:
        return ()

    def throttle(self) -> Throttle | None:
        return None
