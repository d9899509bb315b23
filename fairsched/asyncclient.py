"""The public API for asyncio applications: :class:`AsyncClient`, :class:`~fairsched.Client`'s
methods as coroutines, on psycopg's async connections and pools.

Each method runs :class:`~fairsched.Client`'s own method (its checks, its engine
operation, its statements) on an :class:`psycopg.AsyncConnection` through
:mod:`fairsched.db.bridge`: nothing is stated twice, and the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from fairsched.client import Client, ClientBase
from fairsched.db.bridge import run_async
from fairsched.db.connection import (
    POOL_OPEN_TIMEOUT_SECONDS,
    caller_connection,
    connect,
    make_async_pool,
    operation,
    translate,
)
from fairsched.engine import cancel as cancel_ops
from fairsched.engine import claim as claim_mod
from fairsched.engine import dead, prune, recovery
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import FailOutcome, FailureKind, Lease
from fairsched.errors import DatabaseError
from fairsched.policy import registry as policy
from fairsched.settings import QueueSettings, Settings

T = TypeVar("T")
AsyncConnection = psycopg.AsyncConnection[Any]


class _OnConnection(Client):
    """A :class:`~fairsched.Client` whose every operation runs on one given connection
    (the bridge's view of an async one): :class:`AsyncClient` calls its methods."""

    def __init__(self, conn: psycopg.Connection, settings: Settings) -> None:  # no pools of its own
        self.settings = settings
        self._conn = conn

    def _run(self, fn: Callable[[psycopg.Connection], T], conn: psycopg.Connection | None = None) -> T:
        return fn(self._conn)

    def _claim_run(self, fn: Callable[[psycopg.Connection], T]) -> T:
        return fn(self._conn)


class AsyncClient(ClientBase[AsyncConnectionPool]):
    """A handle on one fairsched database for asyncio code, with its own async pools::

        async with AsyncClient("postgresql://localhost/app") as client:
            job_id = await client.enqueue("emails", {"to": "a@b"}, tenant="acme")

    Every method of :class:`~fairsched.Client` is here, awaited; ``conn=`` takes the
    caller's :class:`psycopg.AsyncConnection` and joins its transaction. A queue whose
    policies have hooks (``on_enqueue``, ``on_claim``, ``on_finish``: they take a sync
    connection) is refused with :class:`~fairsched.errors.InvalidInput`; use
    :class:`~fairsched.Client` for it; ``role``: see :class:`~fairsched.client.ClientBase`.
    See ``docs/async.md``.
    """

    def _new_pool(self, *, claims: bool = False) -> AsyncConnectionPool:
        claim_sessions, options = self._pool_options(claims)

        async def claim_session(conn: AsyncConnection) -> None:
            await run_async(claim_mod.claim_session_configure, conn)

        return make_async_pool(self.dsn, configure=claim_session if claim_sessions else None, **options)

    async def pool(self) -> AsyncConnectionPool:
        """The pool, opened (with the claim pool) on first use; a failed open leaves a fresh
        pool for the next try."""
        if not self._opened:
            try:
                with operation("pool_open"):
                    await self._pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT_SECONDS)
            except DatabaseError:
                await self._pool.close()
                self._pool = self._new_pool()
                # raises the server's own reason, when it has one
                (await asyncio.to_thread(connect, self.dsn, role=self.role, settings=self.settings)).close()
                raise
            await self._claim_pool.open(wait=False)
            self._opened = True
        return self._pool

    async def claim_pool(self) -> AsyncConnectionPool:
        """The pool claims run on: claim sessions
        (:func:`fairsched.engine.claim.claim_session_configure`)."""
        await self.pool()
        return self._claim_pool

    @asynccontextmanager
    async def connection(self, conn: AsyncConnection | None = None) -> AsyncIterator[AsyncConnection]:
        """``conn`` when given (the caller's transaction), else one from the pool."""
        if conn is not None:
            caller_connection(conn, psycopg.AsyncConnection)
            yield conn
            return
        async with self._pooled(await self.pool()) as pooled:
            yield pooled

    @asynccontextmanager
    async def _pooled(self, pool: AsyncConnectionPool) -> AsyncIterator[AsyncConnection]:
        async with AsyncExitStack() as stack:
            try:
                pooled = await stack.enter_async_context(pool.connection())
            except psycopg.Error as e:  # PoolTimeout: no connection could be had in time
                raise translate(e) from e
            yield pooled

    async def _call(self, method: Callable[[Client], T], conn: AsyncConnection | None = None) -> T:
        """Run ``method`` of a :class:`~fairsched.Client` on ``conn`` or a pooled connection."""
        async with self.connection(conn) as c:
            return await run_async(lambda view: method(_OnConnection(view, self.settings)), c)

    async def _claim_call(self, method: Callable[[Client], T]) -> T:
        async with self._pooled(await self.claim_pool()) as c:
            return await run_async(lambda view: method(_OnConnection(view, self.settings)), c)

    async def close(self) -> None:
        """Close the pools."""
        await self._pool.close()
        await self._claim_pool.close()
        self._opened = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- schema and queues -------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations (on a sync connection of their own, in a thread: a
        second run waits for the first); returns the names applied."""
        client = Client(self.dsn, settings=self.settings, role=self.role)
        return await asyncio.to_thread(client.migrate)

    async def declare_queue(self, name: str, queue: QueueSettings | None = None) -> QueueSettings:
        """As :meth:`Client.declare_queue <fairsched.Client.declare_queue>`."""
        return await self._call(lambda c: c.declare_queue(name, queue))

    async def apply_settings(self) -> None:
        """Declare every queue of the client's settings in one transaction."""
        await self._call(lambda c: c.apply_settings())

    # -- enqueue -----------------------------------------------------------

    async def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        tenant: str,
        priority: int = 0,
        aggregate_key: str | None = None,
        aggregate_seq: int | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        conn: AsyncConnection | None = None,
    ) -> int:
        """Enqueue one job; returns its id. With ``conn`` the insert joins the caller's
        open async transaction: rolled back, the job never existed."""
        spec = JobSpec(
            payload, tenant, priority, aggregate_key, aggregate_seq, run_at, max_attempts, idempotency_key
        )
        return (await self.enqueue_many(queue, [spec], conn=conn))[0]

    async def enqueue_many(
        self, queue: str, jobs: Iterable[JobSpec], *, conn: AsyncConnection | None = None
    ) -> list[int]:
        """Enqueue a batch in one statement; ids in input order."""
        specs = list(jobs)
        return await self._call(lambda c: c.enqueue_many(queue, specs), conn)

    # -- leases ------------------------------------------------------------

    async def claim(
        self, queue: str, *, owner: str, lease_seconds: float | None = None, limit: int = 1
    ) -> list[Lease]:
        """Lease up to ``limit`` jobs of ``queue``, on the claim pool."""
        return await self._claim_call(
            lambda c: c.claim(queue, owner=owner, lease_seconds=lease_seconds, limit=limit)
        )

    async def heartbeat(self, lease: Lease, progress: Any = None) -> bool:
        """Report progress; ``False``: the lease was lost."""
        return await self._call(lambda c: c.heartbeat(lease, progress))

    async def complete(self, lease: Lease) -> bool:
        """Mark the job succeeded; ``False`` when the lease no longer held."""
        return await self._call(lambda c: c.complete(lease))

    async def complete_many(self, leases: Iterable[Lease]) -> set[int]:
        """Complete many leases of one owner in one statement; the ids that held."""
        items = list(leases)
        return await self._call(lambda c: c.complete_many(items))

    async def fail(
        self,
        lease: Lease,
        error: BaseException | str,
        *,
        kind: FailureKind | str | None = None,
        code: str | None = None,
    ) -> bool:
        """Record a failed attempt; ``False``: the lease was lost."""
        return await self._call(lambda c: c.fail(lease, error, kind=kind, code=code))

    async def fail_attempt(
        self,
        lease: Lease,
        error: BaseException | str,
        *,
        kind: FailureKind | str | None = None,
        code: str | None = None,
    ) -> FailOutcome:
        """Like :meth:`fail`, returning what happened to the job."""
        return await self._call(lambda c: c.fail_attempt(lease, error, kind=kind, code=code))

    async def fail_many(
        self, failures: Iterable[tuple[Lease, BaseException | str]]
    ) -> dict[int, FailOutcome]:
        """Record failed attempts of one owner in one statement."""
        items = list(failures)
        return await self._call(lambda c: c.fail_many(items))

    async def release(self, lease: Lease) -> bool:
        """Give the job back unfinished; ``False`` when the lease was lost."""
        return await self._call(lambda c: c.release(lease))

    # -- recovery and dead jobs -------------------------------------------

    async def recover(self, *, batch: int | None = None) -> recovery.RecoveryResult:
        """Move expired leases back to pending or to dead; returns the counts."""
        return await self._call(lambda c: c.recover(batch=batch))

    async def prune(
        self, *, queue: str | None = None, dry_run: bool = False, batch: int = prune.BATCH
    ) -> prune.PruneResult:
        """Delete what is past its queue's retention; returns the rows per queue and kind."""
        return await self._call(lambda c: c.prune(queue=queue, dry_run=dry_run, batch=batch))

    async def heads_refresh(self) -> int:
        """Raise the claim heads past claimed jobs; returns how many were raised."""
        return await self._call(lambda c: c.heads_refresh())

    async def statistics_refresh(self) -> bool:
        """ANALYZE the jobs table if its statistics hide a backlog; whether it ran."""
        return await self._call(lambda c: c.statistics_refresh())

    async def dead_list(
        self, *, queue: str | None = None, tenant: str | None = None, limit: int = 100
    ) -> list[dead.DeadJob]:
        """Dead jobs, newest first."""
        return await self._call(lambda c: c.dead_list(queue=queue, tenant=tenant, limit=limit))

    async def job_show(self, job_id: int) -> dict[str, Any]:
        """A job with its full history."""
        return await self._call(lambda c: c.job_show(job_id))

    async def dead_replay(self, job_id: int, *, by: str = "api") -> None:
        """Replay a dead job (same id, history kept)."""
        await self._call(lambda c: c.dead_replay(job_id, by=by))

    async def dead_discard(self, job_id: int, *, by: str = "api") -> None:
        """Resolve a dead job without running it."""
        await self._call(lambda c: c.dead_discard(job_id, by=by))

    # -- cancellation ------------------------------------------------------

    async def cancel(self, job_id: int, *, by: str = "api") -> cancel_ops.CancelOutcome:
        """Cancel a job: ``cancelled`` when it had not run, ``requested`` when it runs."""
        return await self._call(lambda c: c.cancel(job_id, by=by))

    async def cancel_many(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        tenant: str | None = None,
        by: str = "api",
    ) -> cancel_ops.CancelResult:
        """Cancel jobs by ``ids``, or every unfinished job of ``tenant`` on ``queue``."""
        items = None if ids is None else list(ids)
        return await self._call(lambda c: c.cancel_many(items, queue=queue, tenant=tenant, by=by))

    async def cancel_requested(self, leases: Iterable[Lease]) -> set[int]:
        """Which of these leases' jobs (one owner's) have a cancel request."""
        items = list(leases)
        return await self._call(lambda c: c.cancel_requested(items))

    # -- policies ----------------------------------------------------------

    async def queue_stack(self, queue: str) -> policy.QueueStack:
        """The queue's policy stack and parameters."""
        return await self._call(lambda c: c.queue_stack(queue))

    async def set_tenant_share(
        self,
        queue: str,
        tenant: str,
        *,
        weight: float | None = None,
        cap: int | None = None,
        by: str = "api",
    ) -> None:
        """Set a tenant's weight and/or running-job cap on a queue (``cap=0`` removes the cap)."""
        await self._call(lambda c: c.set_tenant_share(queue, tenant, weight=weight, cap=cap, by=by))

    async def set_policy_setting(
        self, queue: str, name: str, value: str | None, *, tenant: str | None = None
    ) -> None:
        """Set (or with ``None`` / ``"off"`` remove) a setting a policy of the queue's stack
        owns, for ``tenant`` or as the queue's default."""
        await self._call(lambda c: c.set_policy_setting(queue, name, value, tenant=tenant))

    async def set_tenant_rate(self, queue: str, tenant: str, rate: str | None) -> None:
        """Set (or with ``None`` / ``"off"`` remove) a tenant's rate limit on a queue."""
        await self._call(lambda c: c.set_tenant_rate(queue, tenant, rate))

    async def set_queue_rate(self, queue: str, rate: str | None) -> None:
        """Set (or remove) the queue's default rate limit."""
        await self._call(lambda c: c.set_queue_rate(queue, rate))

    async def tenant_shares(self, queue: str) -> list[policy.TenantShare]:
        """Every tenant's weighted-share state on ``queue``."""
        return await self._call(lambda c: c.tenant_shares(queue))

    async def aggregates_blocked(self, *, queue: str | None = None) -> list[dead.BlockedAggregate]:
        """Serial aggregates held by a dead job, longest-blocked first."""
        return await self._call(lambda c: c.aggregates_blocked(queue=queue))

    async def aggregate_unblock(self, queue: str, tenant: str, key: str, *, by: str = "api") -> int:
        """Run a blocked aggregate's dead head again (same id); returns its id."""
        return await self._call(lambda c: c.aggregate_unblock(queue, tenant, key, by=by))

    async def aggregate_skip(self, queue: str, tenant: str, key: str, *, by: str = "api") -> int:
        """Discard a blocked aggregate's dead head; returns the discarded id."""
        return await self._call(lambda c: c.aggregate_skip(queue, tenant, key, by=by))
