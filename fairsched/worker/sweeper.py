"""The recovery sweeper: moves expired leases on, from inside every worker process.

Each process sweeps every ``recovery_interval_seconds`` with ±50% jitter (and a
random first delay) so many workers do not sweep in lockstep; the sweep itself
is safe to run from many processes at once. A queue whose sweep fails does not hold
up the others (:func:`fairsched.engine.recovery.recovery_sweep` sweeps queue by queue
then, and logs and counts that queue's failure); a sweep that fails as a whole (the
database is away) is logged here and retried at the next interval.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import psycopg

from fairsched import metrics
from fairsched.client import Client
from fairsched.db.connection import redact
from fairsched.errors import FairschedError
from fairsched.worker.service import Service

log = logging.getLogger(__name__)


class Sweeper(Service):
    """Runs :meth:`Client.recover` periodically in a background thread; calls
    ``on_recovered()`` after a sweep that put jobs back, so local claimers look at once."""

    def __init__(self, client: Client, interval: float, on_recovered: Callable[[], None]) -> None:
        if not interval > 0:
            raise ValueError("recovery interval must be positive")
        super().__init__("fairsched-sweeper")
        self._client = client
        self._interval = interval
        self._on_recovered = on_recovered

    def _run(self) -> None:
        delay = random.uniform(0, self._interval)
        while not self._stop.wait(delay):
            delay = self._interval * random.uniform(0.5, 1.5)
            self.sweep()

    def sweep(self) -> None:
        """One sweep; database errors are logged and retried at the next interval."""
        try:
            result = self._client.recover()
        except Exception as e:
            expected = isinstance(e, FairschedError | psycopg.Error)
            log.warning(
                "recovery sweep failed (%s); retrying later", redact(str(e)), exc_info=None if expected else e
            )
            return
        if result.total:
            for queue, count in result.expired_by_queue.items():
                metrics.LEASE_EXPIRATIONS.labels(queue).inc(count)
            log.info("recovered expired leases: %d retried, %d dead", result.retried, result.dead)
        if result.retried:
            self._on_recovered()
