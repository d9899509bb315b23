"""The heartbeater: renews the leases of running jobs whose reported progress advanced,
and passes cancel requests on to them.

One thread per worker walks the running jobs (:class:`~fairsched.worker.runtime.Running`)
a few times per shortest lease; a renewal the database refuses marks the job's lease
lost, and an outage is logged and retried at the next beat. Once a second it asks which
running jobs have a cancel request (one lookup by id) and marks them cancelled.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from fairsched.client import Client
from fairsched.db.connection import redact
from fairsched.logs import job_scope
from fairsched.worker.app import Job
from fairsched.worker.service import TRANSIENT, Crash, Service

if TYPE_CHECKING:
    from fairsched.worker.runtime import Running

log = logging.getLogger(__name__)

IDLE_TICK = 0.25
"""Longest pause of the heartbeat thread (a new job's first renewal is due at lease/3)."""
CANCEL_POLL_SECONDS = 1.0
"""How often the running jobs' cancel requests are looked up."""


class Heartbeater(Service):
    """Renews the leases of running jobs whose reported progress advanced."""

    def __init__(self, client: Client, running: Running, on_crash: Crash) -> None:
        super().__init__("fairsched-heartbeat", on_crash)
        self._client = client
        self._running = running

    def _run(self) -> None:
        polled = time.monotonic()
        while not self._stop.is_set():
            jobs = self._running.snapshot()
            for job in jobs:
                self._beat(job)
            if jobs and time.monotonic() - polled >= CANCEL_POLL_SECONDS:
                self._cancels(jobs)
                polled = time.monotonic()
            shortest = min((job.lease.lease_seconds for job in jobs), default=IDLE_TICK * 6)
            self._stop.wait(min(IDLE_TICK, max(0.05, shortest / 6)))

    def _beat(self, job: Job) -> None:
        due, value = job.heartbeat_due(time.monotonic())
        if not due or job.lost:
            return
        try:
            held = self._client.heartbeat(job.lease, progress=value)
        except TRANSIENT as e:
            with job_scope(job.lease):
                log.warning("heartbeat of job %d failed (%s); retrying", job.id, redact(str(e)))
            return
        if held:
            job.renewed(value, time.monotonic())
        else:
            job.mark_lost()
            with job_scope(job.lease):
                log.warning("job %d attempt %d: lease lost (heartbeat refused)", job.id, job.attempt)

    def _cancels(self, jobs: list[Job]) -> None:
        live = [job for job in jobs if not job.cancelled and not job.lost]
        try:
            requested = self._client.cancel_requested(job.lease for job in live)
        except TRANSIENT as e:
            log.warning("looking up cancel requests failed (%s); retrying", redact(str(e)))
            return
        for job in live:
            if job.id in requested:
                with job_scope(job.lease):
                    log.info("job %d attempt %d: cancel requested; stopping it", job.id, job.attempt)
                job.mark_cancelled()
