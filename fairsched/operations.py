"""The :class:`~fairsched.Client` operations around the jobs' own lifecycle: recovery and
upkeep, dead jobs, cancellation, tenants' shares, policies' settings (rates), blocked
aggregates."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import psycopg

from fairsched.config import policysettings
from fairsched.config.rates import RATE
from fairsched.engine import cancel as cancel_ops
from fairsched.engine import claimheads, dead, enqueue, prune, recovery
from fairsched.engine.lease import Lease
from fairsched.errors import InvalidInput
from fairsched.policy import registry as policy
from fairsched.settings import Settings

T = TypeVar("T")


class Operations:
    """Mixed into :class:`~fairsched.Client`, which gives :meth:`_run` its connection."""

    settings: Settings

    def _run(self, fn: Callable[[psycopg.Connection], T], conn: psycopg.Connection | None = None) -> T:
        raise NotImplementedError

    # -- recovery and dead jobs -------------------------------------------

    def recover(self, *, batch: int | None = None) -> recovery.RecoveryResult:
        """Move expired leases back to pending or to dead; returns the counts."""
        size = batch or self.settings.recovery_batch
        return self._run(lambda c: recovery.recovery_sweep(c, batch=size))

    def prune(
        self, *, queue: str | None = None, dry_run: bool = False, batch: int = prune.BATCH
    ) -> prune.PruneResult:
        """Delete what is past its queue's retention (every queue, or ``queue``) in
        batches of ``batch`` rows; returns the rows removed per queue and kind. With
        ``dry_run`` nothing changes and the result counts what would go."""
        return self._run(lambda c: prune.jobs_prune(c, queue=queue, batch=batch, dry_run=dry_run))

    def heads_refresh(self) -> int:
        """Raise the claim heads past claimed jobs; returns how many were raised."""
        return self._run(claimheads.heads_refresh)

    def statistics_refresh(self) -> bool:
        """ANALYZE the jobs table if its statistics hide a backlog; returns whether it ran."""
        return self._run(claimheads.statistics_refresh)

    def dead_list(
        self, *, queue: str | None = None, tenant: str | None = None, limit: int = 100
    ) -> list[dead.DeadJob]:
        """Dead jobs, newest first."""
        return self._run(lambda c: dead.dead_list(c, queue=queue, tenant=tenant, limit=limit))

    def job_show(self, job_id: int) -> dict[str, Any]:
        """A job with its full history."""
        return self._run(lambda c: dead.job_show(c, job_id))

    def dead_replay(self, job_id: int, *, by: str = "api") -> None:
        """Replay a dead job (same id, history kept)."""
        self._run(lambda c: dead.dead_replay(c, job_id, by=by))

    def dead_discard(self, job_id: int, *, by: str = "api") -> None:
        """Resolve a dead job without running it."""
        self._run(lambda c: dead.dead_discard(c, job_id, by=by))

    # -- cancellation ------------------------------------------------------

    def cancel(self, job_id: int, *, by: str = "api") -> cancel_ops.CancelOutcome:
        """Cancel a job: ``cancelled`` when it had not run yet, ``requested`` when it runs
        (its handler is asked to stop, and the job ends cancelled unless it succeeds first).
        :class:`~fairsched.errors.JobFinished` when it already finished: nothing changes."""
        ids = cancel_ops.check_ids([job_id])
        return self._run(lambda c: cancel_ops.job_cancel(c, ids[0], by=_by(by)))

    def cancel_many(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        tenant: str | None = None,
        by: str = "api",
    ) -> cancel_ops.CancelResult:
        """Cancel jobs by ``ids`` (at most 10,000), or every unfinished job of ``tenant`` on
        ``queue``; finished and unknown ids are reported, not changed."""
        who = _by(by)
        if ids is not None:
            if queue is not None or tenant is not None:
                raise InvalidInput("cancel jobs either by ids or by queue and tenant, not both")
            picked = cancel_ops.check_ids(list(ids))
            return self._run(lambda c: cancel_ops.jobs_cancel(c, picked, by=who))
        if queue is None or tenant is None:
            raise InvalidInput("cancel_many needs ids, or both queue and tenant")
        enqueue.check_queue_name(queue)
        enqueue.check_label("tenant", tenant, enqueue.MAX_TENANT_CHARS)
        return self._run(lambda c: cancel_ops.tenant_cancel(c, queue, tenant, by=who))

    def cancel_requested(self, leases: Iterable[Lease]) -> set[int]:
        """Which of these leases' jobs (one owner's) have a cancel request."""
        items = list(leases)
        if not items:
            return set()
        return self._run(
            lambda c: cancel_ops.cancel_requested(c, [lease.id for lease in items], owner=items[0].owner)
        )

    # -- policies ----------------------------------------------------------

    def queue_stack(self, queue: str) -> policy.QueueStack:
        """The queue's policy stack and parameters (read at most once a second per process)."""
        return self._run(lambda c: policy.queue_stack(c, queue))

    def set_tenant_share(
        self,
        queue: str,
        tenant: str,
        *,
        weight: float | None = None,
        cap: int | None = None,
        by: str = "api",
    ) -> None:
        """Set a tenant's weight and/or running-job cap on a queue (``cap=0`` removes the cap);
        ``by`` is who, as the audit trail (``fairsched.admin_events``) records it.

        Takes effect on the next claims, for the backlog already queued too. A cap is
        refused (:class:`~fairsched.errors.InvalidInput`, nothing changed) on a queue whose
        stack enforces no caps; ``cap=0`` is allowed on every queue.
        """
        enqueue.check_queue_name(queue)
        enqueue.check_label("tenant", tenant, enqueue.MAX_TENANT_CHARS)
        who = _by(by)
        self._run(lambda c: policy.tenant_share_set(c, queue, tenant, weight=weight, cap=cap, by=who))

    def set_policy_setting(
        self, queue: str, name: str, value: str | None, *, tenant: str | None = None
    ) -> None:
        """Set a setting a policy of the queue's stack owns (``name``, e.g. ``"rate"``) for
        ``tenant``, or without one as the queue's default for its tenants; ``None`` or
        ``"off"`` removes it (a tenant without its own follows the queue's default).

        The owning policy checks the value; a queue whose stack does not name that policy
        is refused. The next claim follows the change.
        """
        enqueue.check_queue_name(queue)
        if tenant is not None:
            enqueue.check_label("tenant", tenant, enqueue.MAX_TENANT_CHARS)
        policysettings.value_checked(name, value, tenant=tenant)
        self._run(lambda c: policysettings.value_change(c, queue, name, value, tenant=tenant))

    def set_tenant_rate(self, queue: str, tenant: str, rate: str | None) -> None:
        """Set a tenant's rate limit on a queue (``"50/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"``), or
        remove it (``None`` or ``"off"``: the tenant follows the queue's default, if any).

        The queue's stack must have the policy that owns ``rate``; the next claim follows
        the change. The setting ``rate`` of :meth:`set_policy_setting`.
        """
        self.set_policy_setting(queue, RATE, rate, tenant=tenant)

    def set_queue_rate(self, queue: str, rate: str | None) -> None:
        """Set (or with ``None`` / ``"off"`` remove) the queue's default rate limit, for
        every tenant without one of its own; like :meth:`set_tenant_rate` otherwise."""
        self.set_policy_setting(queue, RATE, rate)

    def tenant_shares(self, queue: str) -> list[policy.TenantShare]:
        """Every tenant's weighted-share state on ``queue``."""
        enqueue.check_queue_name(queue)
        return self._run(lambda c: policy.tenant_shares_list(c, queue))

    def aggregates_blocked(self, *, queue: str | None = None) -> list[dead.BlockedAggregate]:
        """Serial aggregates held by a dead job, longest-blocked first."""
        return self._run(lambda c: dead.aggregates_blocked(c, queue=queue))

    def aggregate_unblock(self, queue: str, tenant: str, key: str, *, by: str = "api") -> int:
        """Run a blocked aggregate's dead head again (same id); returns its id."""
        return self._run(lambda c: dead.aggregate_unblock(c, queue, tenant, key, by=by))

    def aggregate_skip(self, queue: str, tenant: str, key: str, *, by: str = "api") -> int:
        """Discard a blocked aggregate's dead head and let the next job run; returns the discarded id."""
        return self._run(lambda c: dead.aggregate_skip(c, queue, tenant, key, by=by))


def _by(by: str) -> str:
    """Who made a change, as the audit trail records it."""
    return enqueue.check_label("by", by, enqueue.MAX_TENANT_CHARS)
