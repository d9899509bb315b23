"""Run an application's handlers as a worker does, on a test database.

:func:`run_job` enqueues one job, leases it with the queue's real claim, runs its
handler with a :class:`~fairsched.worker.app.Job` whose lease a worker's heartbeater
renews while progress advances (so ``job.lost`` and
:class:`~fairsched.errors.LeaseLost` behave as under a worker), then records the
attempt with the fenced completion or failure the worker's finisher uses, classified by
the same code (:mod:`fairsched.engine.retry`). :func:`drain` does the same for
whatever its queues have claimable, one job at a time, until nothing is left.

There is no in-memory variant: whether a failure is retried or dead, and whether a
completion still held its lease, is decided by the database's statements.
"""

from __future__ import annotations

import asyncio
import enum
import os
import time
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from fairsched import tracing
from fairsched.client import Client
from fairsched.engine import retry
from fairsched.engine.lease import FailureKind, Lease
from fairsched.logs import job_scope
from fairsched.testing.queries import QUERIES
from fairsched.worker.app import App, Handler, Job
from fairsched.worker.heartbeat import Heartbeater
from fairsched.worker.runtime import Running

DRAIN_MAX_RUNS = 1000
"""Most attempts one :func:`drain` runs before it gives up on a queue that never empties."""


class RunStatus(enum.StrEnum):
    """What the database recorded for an attempt."""

    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    """Failed; pending again, claimable from ``retry_at``."""
    DEAD = "dead"
    """Failed permanently, or out of attempts."""
    LEASE_LOST = "lease_lost"
    """The lease no longer held when the attempt ended: nothing was recorded."""


class RunError(AssertionError):
    """:func:`run_job` or :func:`drain` could not run what it was asked to."""


@dataclass(frozen=True)
class JobOutcome:
    """One attempt of a job: what the handler did and what the database recorded.

    ``progress`` holds every value the handler reported, in order (the counter for a
    bare ``job.progress()``). For a failed attempt ``error`` is the exception, with the
    kind and code the worker records for it.
    """

    job: Job
    status: RunStatus
    progress: tuple[Any, ...] = ()
    error: BaseException | None = None
    error_kind: FailureKind | None = None
    error_code: str | None = None
    retry_at: datetime | None = None

    @property
    def job_id(self) -> int:
        """The job's id."""
        return self.job.id

    def __str__(self) -> str:
        failed = f" after {self.error_code} ({self.error_kind}): {self.error}" if self.error else ""
        return f"job {self.job.id} attempt {self.job.attempt} on {self.job.queue}: {self.status}{failed}"


class _RecordingJob(Job):
    """A :class:`Job` that also keeps every progress value its handler reports."""

    __slots__ = ("reported",)

    def __init__(self, lease: Lease, claimed_local: float) -> None:
        super().__init__(lease, claimed_local)
        self.reported: list[Any] = []

    def progress(self, value: Any = None) -> None:
        super().progress(value)
        self.reported.append(len(self.reported) + 1 if value is None else value)


def default_owner() -> str:
    """The lease owner the helpers claim as."""
    return f"fairsched-testing:{os.getpid()}"


@contextmanager
def _client_for(client: Client | str) -> Iterator[Client]:
    """``client`` itself, or a client on the DSN ``client``, closed afterwards."""
    if isinstance(client, Client):
        yield client
        return
    with Client(client) as opened:
        yield opened


def run_job(
    app: App,
    queue: str,
    payload: Any,
    *,
    tenant: str,
    client: Client | str,
    priority: int = 0,
    aggregate_key: str | None = None,
    aggregate_seq: int | None = None,
    max_attempts: int | None = None,
    idempotency_key: str | None = None,
    lease_seconds: float | None = None,
    owner: str | None = None,
) -> JobOutcome:
    """Enqueue one job on ``queue``, claim it, run ``app``'s handler on it and record the
    attempt as a worker would; returns what happened.

    ``client`` is a :class:`~fairsched.client.Client` or a DSN of a migrated database
    where ``queue`` is declared; the queue must have no other job due (use :func:`drain`
    for a backlog). ``lease_seconds`` overrides the queue's lease for this claim. Raises
    :class:`RunError` when the job cannot be claimed now (a serial aggregate waiting on
    an earlier job, a rate limit, an idempotency key of a job that ran).
    """
    app.handler_for(queue)  # no handler: ConfigError before anything is written
    with _client_for(client) as c:
        with c.connection() as conn:
            row = conn.execute(QUERIES["testing_queue_due"], {"queue": queue}).fetchone()
        if row and row[0]:
            raise RunError(
                f"queue {queue!r} already has {row[0]} claimable jobs: run_job runs one new job on "
                "a queue with nothing else to claim; run a backlog with drain()"
            )
        job_id = c.enqueue(
            queue,
            payload,
            tenant=tenant,
            priority=priority,
            aggregate_key=aggregate_key,
            aggregate_seq=aggregate_seq,
            max_attempts=max_attempts,
            idempotency_key=idempotency_key,
        )
        leases = c.claim(queue, owner=owner or default_owner(), lease_seconds=lease_seconds)
        if not leases:
            raise RunError(f"job {job_id} on {queue!r} was enqueued but is not claimable: {_why(c, job_id)}")
        if leases[0].id != job_id:
            c.release(leases[0])
            raise RunError(f"the claim on {queue!r} leased job {leases[0].id} before job {job_id}")
        return attempt_run(c, app, leases[0])


def _why(client: Client, job_id: int) -> str:
    with client.connection() as conn:
        row = conn.execute(QUERIES["testing_job_state"], {"id": job_id}).fetchone()
    if row is None:
        return "it is gone"
    status, available_at, later = row
    if status == "waiting":
        return "it waits behind an earlier job of its serial aggregate"
    if status == "pending" and later:
        return f"it is due at {available_at:%Y-%m-%d %H:%M:%S%z}"
    if status == "pending":
        return "a policy holds it back (a rate limit or a running-job cap)"
    return f"it is {status} already (an idempotency key of an earlier job?)"


def drain(
    client_or_dsn: Client | str,
    app: App,
    queue: str | Sequence[str] | None = None,
    *,
    max_runs: int = DRAIN_MAX_RUNS,
    lease_seconds: float | None = None,
    owner: str | None = None,
) -> list[JobOutcome]:
    """Run what ``queue`` (a name, several, or by default every queue of ``app``) has
    claimable, one job at a time in claim order (the queues in turn), until no claim
    leases anything; returns every attempt in the order it ran.

    Failed jobs whose retry is due at once are run again; retries due later are left
    pending (declare the queue with ``backoff_base_seconds=0`` to drain them too).
    Raises :class:`RunError` when jobs are still claimable after ``max_runs`` attempts.
    """
    names = app.queues if queue is None else [queue] if isinstance(queue, str) else list(queue)
    for name in names:
        app.handler_for(name)
    outcomes: list[JobOutcome] = []
    with _client_for(client_or_dsn) as client:
        while True:
            ran = False
            for name in names:
                leases = client.claim(name, owner=owner or default_owner(), lease_seconds=lease_seconds)
                if not leases:
                    continue
                if len(outcomes) >= max_runs:
                    client.release(leases[0])
                    raise RunError(
                        f"drain ran {max_runs} attempts and {name!r} still has claimable jobs: "
                        "raise max_runs for a larger backlog, or do handlers enqueue work forever?"
                    )
                outcomes.append(attempt_run(client, app, leases[0]))
                ran = True
            if not ran:
                return outcomes


def attempt_run(client: Client, app: App, lease: Lease) -> JobOutcome:
    """Run ``lease``'s job through its handler as a worker slot does, its lease renewed by
    a heartbeater while progress advances, then record the attempt (fenced).

    Whatever the handler raises is its failure, as in a worker; an exception that is not
    an :class:`Exception` (``KeyboardInterrupt``, ``pytest.fail``) is recorded, then raised.
    """
    handler = app.handler_for(lease.queue)
    job = _RecordingJob(lease, time.monotonic())
    running = Running()
    running.add([job])
    crashes: list[BaseException] = []
    heartbeats = Heartbeater(client, running, crashes.append)
    heartbeats.start()
    error: BaseException | None = None
    try:
        _call(handler, job, app.is_async(lease.queue))
    except BaseException as e:
        error = e
    finally:
        running.remove(job)
        heartbeats.stop()
    if crashes:
        raise crashes[0]
    outcome = _record(client, job, error)
    if error is not None and not isinstance(error, Exception):
        raise error
    return outcome


def _call(handler: Handler, job: Job, is_async: bool) -> None:
    """Call a sync handler here; run an async one on an event loop of its own in another
    thread (as a worker's shared loop thread does), so tests that run a loop can call this;
    either with the job in the logs' scope."""
    if not is_async:
        # what the handler logs and traces is about its job, as in a worker
        with job_scope(job.lease), tracing.run_span(job.lease):
            handler(job)
        return

    async def scoped() -> None:
        with job_scope(job.lease), tracing.run_span(job.lease):
            await cast(Coroutine[Any, Any, Any], handler(job))

    with ThreadPoolExecutor(1, thread_name_prefix="fairsched-testing-asyncio") as pool:
        pool.submit(asyncio.run, scoped()).result()


def _record(client: Client, job: _RecordingJob, error: BaseException | None) -> JobOutcome:
    """Record the attempt with the worker's statements and classification."""
    progress = tuple(job.reported)
    if error is None:
        held = client.complete(job.lease)
        return JobOutcome(job, RunStatus.SUCCEEDED if held else RunStatus.LEASE_LOST, progress)
    failed = client.fail_attempt(job.lease, error)
    if not failed.held:
        status = RunStatus.LEASE_LOST
    elif failed.status == "dead":
        status = RunStatus.DEAD
    else:
        status = RunStatus.RETRY_SCHEDULED
    kind, code = retry.classify(error), retry.error_code(error)
    return JobOutcome(job, status, progress, error, kind, code, failed.retry_at)
