"""The public API: enqueue, claim and the fenced lease transitions; recovery, dead jobs,
cancellation and tenants' shares come from :class:`~fairsched.operations.Operations`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any, Generic, Self, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from fairsched import bounds, tracing
from fairsched.config.sync import queue_declare, queues_declare
from fairsched.db.connection import (
    POOL_OPEN_TIMEOUT_SECONDS,
    Role,
    caller_connection,
    connect,
    make_pool,
    operation,
    translate,
)
from fairsched.db.migrate import migrate
from fairsched.engine import claim as claim_mod
from fairsched.engine import enqueue, retry
from fairsched.engine import lease as lease_ops
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import FailureKind, Lease
from fairsched.engine.stackfunctions import stored_stacks_install
from fairsched.errors import DatabaseError, InvalidInput
from fairsched.operations import Operations
from fairsched.settings import QueueSettings, Settings, load_settings

T = TypeVar("T")
P = TypeVar("P")


class ClientBase(Generic[P]):
    """What :class:`Client` and :class:`~fairsched.AsyncClient` share: the database, the
    settings, the role, and how their two pools of type ``P`` are made.

    ``role`` decides the server-side limits its sessions set
    (:data:`fairsched.db.connection.ROLE_LIMITS`): workers' and applications' clients
    keep the default, operator tools pass ``Role.OPERATOR``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        settings: Settings | None = None,
        pool_size: int | None = None,
        role: Role = Role.WORKER,
    ) -> None:
        self.dsn = dsn
        self.settings = settings or Settings()
        self.role = role
        self._pool_size = pool_size or self.settings.pool_max_size or 10
        self._pool = self._new_pool()
        self._claim_pool = self._new_pool(claims=True)
        self._opened = False

    @classmethod
    def from_settings(
        cls, settings: Settings | None = None, *, config: str | None = None, role: Role = Role.WORKER
    ) -> Self:
        """A client for ``settings.database_url``, or the embedded server when it is unset."""
        settings = settings or load_settings(config)
        dsn = settings.database_url
        if dsn is None:
            from fairsched.db.embedded import embedded_dsn

            dsn = embedded_dsn(settings.data_dir)
        return cls(dsn, settings=settings, role=role)

    # -- connections -------------------------------------------------------

    def _new_pool(self, *, claims: bool = False) -> P:
        """The claim pool (claim sessions, :data:`Role.CLAIMS <fairsched.db.connection.Role>`
        limits) or the main one (the client's role's limits)."""
        raise NotImplementedError

    def _pool_options(self, claims: bool) -> tuple[bool, dict[str, Any]]:
        """Whether a pool's sessions are claim sessions, and the pool's other options."""
        threshold = self.settings.prepare_threshold
        role = Role.CLAIMS if claims else self.role
        options = {"max_size": self._pool_size, "prepare_threshold": threshold, "role": role}
        # Behind PgBouncer (prepared statements off) a session setting would outlive the
        # transaction on a server connection other clients share: no claim sessions there.
        return claims and threshold is not None, {**options, "settings": self.settings}


class Client(Operations, ClientBase[ConnectionPool]):
    """A handle on one fairsched database, with its own connection pool::

    client = Client("postgresql://localhost/app")
    job_id = client.enqueue("emails", {"to": "a@b"}, tenant="acme")

    ``role``: see :class:`ClientBase`.
    """

    def _new_pool(self, *, claims: bool = False) -> ConnectionPool:
        claim_sessions, options = self._pool_options(claims)
        configure = claim_mod.claim_session_configure if claim_sessions else None
        return make_pool(self.dsn, configure=configure, **options)

    @property
    def pool(self) -> ConnectionPool:
        """The pool, opened on first use; a failed open leaves fresh pools for the next try.

        Claims run on a pool of their own (claim sessions, see
        :func:`fairsched.engine.claim.claim_session_configure`, unless ``prepare_threshold`` is
        unset), opened with this one; its connections are made as claims need them.
        """
        if not self._opened:
            try:
                with operation("pool_open"):
                    self._pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT_SECONDS)
            except DatabaseError:
                self._pool.close()
                self._pool = self._new_pool()
                # raises the server's own reason, when it has one
                connect(self.dsn, role=self.role, settings=self.settings).close()
                raise
            self._claim_pool.open(wait=False)
            self._opened = True
        return self._pool

    @property
    def claim_pool(self) -> ConnectionPool:
        """The pool claims run on: claim sessions (:func:`fairsched.engine.claim.claim_session_configure`)."""
        self.pool  # noqa: B018 - opens both pools, or fails now
        return self._claim_pool

    @contextmanager
    def connection(self, conn: psycopg.Connection | None = None) -> Iterator[psycopg.Connection]:
        """``conn`` when given (the caller's transaction), else one from the pool."""
        if conn is not None:
            caller_connection(conn, psycopg.Connection)
            yield conn
            return
        with self._pooled(self.pool) as pooled:
            yield pooled

    @contextmanager
    def _pooled(self, pool: ConnectionPool) -> Iterator[psycopg.Connection]:
        with ExitStack() as stack:
            try:
                pooled = stack.enter_context(pool.connection())
            except psycopg.Error as e:  # PoolTimeout: no connection could be had in time
                raise translate(e) from e
            yield pooled

    def _run(self, fn: Callable[[psycopg.Connection], T], conn: psycopg.Connection | None = None) -> T:
        with self.connection(conn) as c:
            return fn(c)

    def _claim_run(self, fn: Callable[[psycopg.Connection], T]) -> T:
        with self._pooled(self.claim_pool) as c:
            return fn(c)

    def close(self) -> None:
        """Close the pools."""
        self._pool.close()
        self._claim_pool.close()
        self._opened = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema and queues -------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply pending migrations on a connection of their own (no lock wait limit: a
        second run waits for the first), then install the functions of every stored
        queue's policy stack that an upgrade changed; returns the names applied."""
        with connect(self.dsn, role=Role.MIGRATIONS, settings=self.settings) as conn:
            applied = migrate(conn)
            stored_stacks_install(conn)
            return applied

    def declare_queue(self, name: str, queue: QueueSettings | None = None) -> QueueSettings:
        """Create a queue, or change the settings of an existing one that ``queue`` was
        given explicitly: ``QueueSettings(lease_seconds=60)`` changes the lease and
        leaves the stored policy stack, tenants and the rest as they are. A new queue
        takes the defaults for what is not given. Returns the queue's settings now."""
        enqueue.check_queue_name(name)
        given = queue or QueueSettings()
        return self._run(lambda c: queue_declare(c, name, given))

    def apply_settings(self) -> None:
        """Declare every queue of the client's settings in one transaction."""
        self._run(lambda c: queues_declare(c, self.settings.queues))

    # -- enqueue -----------------------------------------------------------

    def enqueue(
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
        conn: psycopg.Connection | None = None,
    ) -> int:
        """Enqueue one job; returns its id (the existing job's id for a known idempotency key).

        With ``conn`` the insert joins the caller's open transaction.
        """
        spec = JobSpec(
            payload, tenant, priority, aggregate_key, aggregate_seq, run_at, max_attempts, idempotency_key
        )
        return self.enqueue_many(queue, [spec], conn=conn)[0]

    def enqueue_many(
        self, queue: str, jobs: Iterable[JobSpec], *, conn: psycopg.Connection | None = None
    ) -> list[int]:
        """Enqueue a batch in one statement (one round trip); ids in input order."""
        specs = list(jobs)
        limit = self.settings.max_payload_bytes
        with tracing.enqueue_span(queue, [spec.tenant for spec in specs]) as enqueued:
            ids = self._run(lambda c: enqueue.jobs_enqueue(c, queue, specs, max_payload_bytes=limit), conn)
            enqueued(ids)
        return ids

    # -- leases ------------------------------------------------------------

    def claim(
        self, queue: str, *, owner: str, lease_seconds: float | None = None, limit: int = 1
    ) -> list[Lease]:
        """Lease up to ``limit`` jobs of ``queue`` (``lease_seconds``, in (0, 7 days], defaults
        to the queue's)."""
        enqueue.check_queue_name(queue)
        enqueue.check_label("owner", owner, 200)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= claim_mod.MAX_BATCH:
            raise InvalidInput(f"limit must be between 1 and {claim_mod.MAX_BATCH}")
        if lease_seconds is not None:
            lease_seconds = bounds.number_checked(
                "lease_seconds", lease_seconds, 0, bounds.LEASE_MAX_SECONDS, above=True
            )

        def claim(c: psycopg.Connection) -> list[Lease]:
            return claim_mod.jobs_claim(c, queue, owner=owner, limit=limit, lease_seconds=lease_seconds)

        with tracing.claim_spans(queue) as traced:
            return traced(self._claim_run(claim))

    def heartbeat(self, lease: Lease, progress: Any = None) -> bool:
        """Report progress; the lease is renewed only when progress advanced. ``False``: lost."""
        return self._run(lambda c: lease_ops.lease_renew(c, lease, progress)) is not None

    def complete(self, lease: Lease) -> bool:
        """Mark the job succeeded; ``False`` when the lease no longer held (nothing changed)."""
        return lease.id in self.complete_many([lease])

    def complete_many(self, leases: Iterable[Lease]) -> set[int]:
        """Complete many leases of one owner in one statement; returns the ids that held."""
        items = list(leases)
        with tracing.settle_spans("complete", items) as outcomes:
            done = self._run(lambda c: lease_ops.leases_complete(c, items))
            outcomes.update((lease.id, "succeeded" if lease.id in done else tracing.LOST) for lease in items)
        return done

    def fail(
        self,
        lease: Lease,
        error: BaseException | str,
        *,
        kind: FailureKind | str | None = None,
        code: str | None = None,
    ) -> bool:
        """Record a failed attempt: dead when permanent or exhausted, else retried after
        backoff. ``kind`` defaults to the exception's class. ``False``: lease lost."""
        return self.fail_attempt(lease, error, kind=kind, code=code).held

    def fail_attempt(
        self,
        lease: Lease,
        error: BaseException | str,
        *,
        kind: FailureKind | str | None = None,
        code: str | None = None,
    ) -> lease_ops.FailOutcome:
        """Like :meth:`fail`, returning what happened to the job."""
        return self._fail_recorded([self._failure(lease, error, kind=kind, code=code)])[lease.id]

    def fail_many(
        self, failures: Iterable[tuple[Lease, BaseException | str]]
    ) -> dict[int, lease_ops.FailOutcome]:
        """Record failed attempts of one owner in one statement (kinds and codes as
        :meth:`fail` derives them); returns what happened to each job id."""
        return self._fail_recorded([self._failure(lease, error) for lease, error in failures])

    def _fail_recorded(self, items: list[lease_ops.Failure]) -> dict[int, lease_ops.FailOutcome]:
        codes = {f.lease.id: f.code for f in items}
        with tracing.settle_spans("fail", [f.lease for f in items], codes) as outcomes:
            results = self._run(lambda c: lease_ops.leases_fail(c, items))
            outcomes.update((job_id, r.status or tracing.LOST) for job_id, r in results.items())
        return results

    def _failure(
        self,
        lease: Lease,
        error: BaseException | str,
        *,
        kind: FailureKind | str | None = None,
        code: str | None = None,
    ) -> lease_ops.Failure:
        if isinstance(error, BaseException):
            resolved = FailureKind(kind) if kind is not None else retry.classify(error)
            code = code or retry.error_code(error)
        else:
            resolved = FailureKind(kind) if kind is not None else FailureKind.UNKNOWN
            code = code or "error"
        text = (
            retry.error_text(error, self.settings.max_error_chars)
            if isinstance(error, BaseException)
            else error[: self.settings.max_error_chars]
        )
        return lease_ops.Failure(lease, resolved, code[: retry.MAX_CODE_CHARS], text)

    def release(self, lease: Lease) -> bool:
        """Give the job back unfinished, claimable at once; ``False`` when the lease was lost."""
        with tracing.settle_spans("release", [lease]) as outcomes:
            held = self._run(lambda c: lease_ops.lease_release(c, lease))
            outcomes[lease.id] = "pending" if held else tracing.LOST
        return held
