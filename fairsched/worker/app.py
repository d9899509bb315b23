"""Handlers and the job object they receive.

>>> app = App()
>>> @app.handler("emails")
... def send(job: Job) -> None:
...     job.progress("sent")
>>> app.queues
['emails']
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fairsched.engine.enqueue import check_queue_name
from fairsched.engine.lease import Lease
from fairsched.errors import ConfigError, InvalidInput, JobCancelled, LeaseLost

Handler = Callable[["Job"], Any] | Callable[["Job"], Awaitable[Any]]
H = TypeVar("H", bound=Handler)


class App:
    """The handlers a worker runs, one per queue."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def handler(self, queue: str) -> Callable[[H], H]:
        """Register a sync or ``async`` function ``handle(job)`` for ``queue``."""
        check_queue_name(queue)

        def register(fn: H) -> H:
            if queue in self._handlers:
                raise ConfigError(f"queue {queue!r} already has a handler")
            self._handlers[queue] = fn
            return fn

        return register

    @property
    def queues(self) -> list[str]:
        """The queues with a handler."""
        return list(self._handlers)

    def handler_for(self, queue: str) -> Handler:
        """The handler of ``queue``; :class:`ConfigError` when there is none."""
        try:
            return self._handlers[queue]
        except KeyError:
            known = ", ".join(self._handlers) or "none"
            raise ConfigError(f"no handler for queue {queue!r} (handlers: {known})") from None

    def is_async(self, queue: str) -> bool:
        """Whether the handler of ``queue`` is a coroutine function."""
        return inspect.iscoroutinefunction(self.handler_for(queue))


class Job:
    """One claimed attempt of a job, as its handler sees it.

    ``progress(value)`` reports that work advanced; the worker renews the lease
    only while reported progress changes. When the lease is lost (expired, or
    taken over after expiry) ``lost`` turns true and ``progress`` raises
    :class:`~fairsched.errors.LeaseLost`: the handler should stop, since its
    result will not be recorded.

    When someone cancels the running job (:meth:`fairsched.Client.cancel`) the worker
    sees it within about a second: ``cancelled`` turns true, ``progress`` raises
    :class:`~fairsched.errors.JobCancelled` (let it propagate), and an ``async``
    handler's task is cancelled. The job then ends ``cancelled``; a handler that returns
    normally anyway completes it.
    """

    __slots__ = (
        "_beat_value",
        "_cancelled",
        "_expires_local",
        "_lock",
        "_lost",
        "_on_cancel",
        "_progress",
        "_reported",
        "lease",
    )

    def __init__(self, lease: Lease, claimed_local: float) -> None:
        self.lease = lease
        self._lock = threading.Lock()
        self._progress: Any = None
        self._reported = 0
        self._beat_value: Any = None
        self._lost = False
        self._cancelled = False
        self._on_cancel: Callable[[], object] | None = None
        # On the local monotonic clock the lease has surely expired by then:
        # the claim's database now() came before ``claimed_local``.
        self._expires_local = claimed_local + (lease.expires_at - lease.started_at).total_seconds()

    @property
    def id(self) -> int:
        """The job id."""
        return self.lease.id

    @property
    def queue(self) -> str:
        """The job's queue."""
        return self.lease.queue

    @property
    def tenant(self) -> str:
        """The job's tenant."""
        return self.lease.tenant

    @property
    def payload(self) -> Any:
        """The job's payload (decoded JSON)."""
        return self.lease.payload

    @property
    def attempt(self) -> int:
        """This attempt's number, from 1."""
        return self.lease.attempt

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts: pass it to downstream systems."""
        return self.lease.idempotency_key

    @property
    def aggregate_key(self) -> str | None:
        """The aggregate the job belongs to, if any."""
        return self.lease.aggregate_key

    @property
    def aggregate_seq(self) -> int | None:
        """The job's place in its aggregate, if any."""
        return self.lease.aggregate_seq

    @property
    def lost(self) -> bool:
        """True once the lease no longer holds (nothing this attempt does will be recorded)."""
        return self._lost or time.monotonic() >= self._expires_local

    @property
    def cancelled(self) -> bool:
        """True once a cancel of this job was requested: stop, and let the worker record it."""
        return self._cancelled

    def progress(self, value: Any = None) -> None:
        """Report progress (a JSON value; a counter when omitted), which keeps the lease.

        Raises :class:`LeaseLost` when the lease is already lost, :class:`JobCancelled`
        when a cancel was requested.
        """
        if self._cancelled:
            raise JobCancelled(f"job {self.id}: cancelled while it ran; stop working on it")
        if self.lost:
            raise LeaseLost(f"job {self.id}: lease lost (attempt {self.attempt}); stop working on it")
        try:
            json.dumps(value)
        except (TypeError, ValueError) as e:
            raise InvalidInput(f"progress must be a JSON value: {e}") from None
        with self._lock:
            self._reported += 1
            self._progress = self._reported if value is None else value

    def __repr__(self) -> str:
        return f"<Job {self.id} queue={self.queue} tenant={self.tenant} attempt={self.attempt}>"

    # -- used by the worker runtime --------------------------------------

    def heartbeat_due(self, now: float) -> tuple[bool, Any]:
        """Whether to heartbeat now, and the progress to send: progress changed since the
        last renewal and a third of the lease has passed since it."""
        with self._lock:
            changed = self._reported > 0 and self._progress != self._beat_value
            third_gone = now >= self._expires_local - self.lease.lease_seconds * 2 / 3
            return changed and third_gone, self._progress

    def renewed(self, value: Any, at_local: float) -> None:
        """A heartbeat carrying ``value`` renewed the lease, to at most ``lease_seconds``
        after ``at_local`` (taken when the heartbeat returned). Renewals capped by
        ``max_runtime`` end sooner; the next heartbeat then finds the lease lost."""
        with self._lock:
            self._beat_value = value
            self._expires_local = at_local + self.lease.lease_seconds

    def mark_lost(self) -> None:
        """The database said the lease no longer holds."""
        self._lost = True

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (from another thread) when a cancel is requested: how the
        worker cancels an ``async`` handler's task."""
        with self._lock:
            self._on_cancel = callback
            requested = self._cancelled
        if requested:
            callback()

    def mark_cancelled(self) -> None:
        """The database holds a cancel request for this job."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callback = self._on_cancel
        if callback is not None:
            callback()
