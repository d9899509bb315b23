"""The head keeper: keeps claims' index scans short, from inside every worker.

Each process raises the claim heads past claimed jobs every ``head_refresh_seconds``
with ±50% jitter, and every :data:`STATISTICS_SECONDS` (first when it starts) looks
whether the jobs table's planner statistics hide a backlog, analyzing it if so. A
refresh that finds nothing behind is one read-only statement; many processes may
refresh at once (each row is locked with ``SKIP LOCKED``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

import psycopg

from fairsched.client import Client
from fairsched.db.connection import redact
from fairsched.errors import FairschedError
from fairsched.worker.service import Service

log = logging.getLogger(__name__)

STATISTICS_SECONDS = 10.0
"""How often each worker looks at the jobs table's statistics (:meth:`Client.statistics_refresh`)."""


class HeadKeeper(Service):
    """Runs :meth:`Client.heads_refresh` periodically in a background thread, and
    :meth:`Client.statistics_refresh` every :data:`STATISTICS_SECONDS`."""

    def __init__(self, client: Client, interval: float) -> None:
        if not interval > 0:
            raise ValueError("head refresh interval must be positive")
        super().__init__("fairsched-headkeeper")
        self._client = client
        self._interval = interval

    def _run(self) -> None:
        statistics_due = time.monotonic()
        while not self._stop.wait(self._interval * random.uniform(0.5, 1.5)):
            if time.monotonic() >= statistics_due:
                self._attempt(self._client.statistics_refresh, "jobs statistics check")
                statistics_due = time.monotonic() + STATISTICS_SECONDS
            self.refresh()

    def refresh(self) -> None:
        """One refresh; database errors are logged and retried at the next interval."""
        self._attempt(self._client.heads_refresh, "claim head refresh")

    def _attempt(self, step: Callable[[], object], what: str) -> None:
        try:
            step()
        except Exception as e:
            expected = isinstance(e, FairschedError | psycopg.Error)
            trace = None if expected else e
            log.warning("%s failed (%s); retrying later", what, redact(str(e)), exc_info=trace)
