"""The schedule duty: enqueues the ticks of periodic jobs, from inside every worker process.

Each process sleeps until the earliest next tick (database time), at most
:data:`MAX_SLEEP_SECONDS` so that a schedule `config apply` writes is seen soon, then runs
one pass of :func:`~fairsched.schedules.ticks.schedules_enqueue_due`. Many processes wake
for the same tick; each tick is enqueued once whatever their number (the pass locks the
schedule's row and moves its tick on in the enqueuing transaction). A pass that fails (the
database is away) is logged and retried with a capped backoff. A worker whose role may
not enqueue (it lacks ``fairsched_producer``'s grants) turns its duty off with one warning.
"""

from __future__ import annotations

import logging

import psycopg

from fairsched import metrics
from fairsched.client import Client
from fairsched.db.connection import redact
from fairsched.errors import FairschedError
from fairsched.schedules.ticks import denied, schedules_enqueue_due, schedules_wait
from fairsched.worker.service import Crash, Service, backoff_delay

log = logging.getLogger(__name__)

MAX_SLEEP_SECONDS = 2.0
"""The longest sleep between passes: how late a newly applied schedule's first tick may be."""
STILL_DUE_SECONDS = 0.5
"""The sleep when a schedule is due after a pass (another process enqueues it, or it failed)."""
EARLY_SECONDS = 0.005
"""Added to the sleep until a tick, so as not to wake just before it."""


class Scheduler(Service):
    """Runs schedule passes in a background thread, sleeping until the next tick."""

    def __init__(self, client: Client, on_crash: Crash | None = None) -> None:
        super().__init__("fairsched-scheduler", on_crash)
        self._client = client
        self._failures = 0
        self.off = False
        """Whether the duty turned itself off: this worker's role may not enqueue."""

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            delay = self.tick()

    def tick(self) -> float:
        """One pass; returns how long to sleep before the next one."""
        try:
            with self._client.connection() as conn:
                for ticked in schedules_enqueue_due(
                    conn, max_payload_bytes=self._client.settings.max_payload_bytes
                ):
                    caught_up = "true" if ticked.skipped_since is not None else "false"
                    metrics.SCHEDULE_TICKS.labels(ticked.schedule, caught_up).inc()
                    log.info(
                        "schedule %s: tick %s enqueued as job %d",
                        ticked.schedule,
                        ticked.tick.isoformat(),
                        ticked.job_id,
                    )
                wait = schedules_wait(conn)
        except (FairschedError, psycopg.Error) as e:
            if denied(e):
                log.warning(
                    "schedule duty off in this worker: its role may not enqueue (%s); grant it "
                    "fairsched_producer too, e.g. GRANT fairsched_producer TO <worker login> "
                    "(docs/schedules.md)",
                    redact(str(e)),
                )
                self.off = True
                self._stop.set()
                return 0.0
            delay = backoff_delay(self._failures, base=0.5, cap=MAX_SLEEP_SECONDS * 5)
            if self._failures == 0:
                log.warning("schedule pass failed (%s); retrying", redact(str(e)))
            self._failures += 1
            return delay
        self._failures = 0
        if wait is None:
            return MAX_SLEEP_SECONDS
        if wait <= 0:  # still due after the pass: another process holds it, or it failed
            return STILL_DUE_SECONDS
        return min(wait + EARLY_SECONDS, MAX_SLEEP_SECONDS)
