"""The runtime of a worker whose database answered: its queues, services and shutdown.

:class:`Runtime` starts one :class:`~fairsched.worker.runner.QueueRunner` per queue,
the finisher, the heartbeater, the listener, the recovery sweeper, the head keeper, the
pruner and the schedule duty;
:class:`Running` holds the jobs whose handlers run now. On stop it claims no more, lets
running jobs finish within the grace period, then releases (fenced) what still runs
and records what finished.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Mapping

from fairsched import metrics
from fairsched.client import Client
from fairsched.config import capacity
from fairsched.engine.lease import Lease
from fairsched.logs import job_scope
from fairsched.settings import Settings
from fairsched.worker.app import App, Job
from fairsched.worker.finisher import Finisher
from fairsched.worker.headkeeper import HeadKeeper
from fairsched.worker.heartbeat import Heartbeater
from fairsched.worker.listener import Listener
from fairsched.worker.presence import Presence
from fairsched.worker.pruner import Pruner
from fairsched.worker.runner import QueueRunner
from fairsched.worker.scheduler import Scheduler
from fairsched.worker.service import retry_transient
from fairsched.worker.sweeper import Sweeper

log = logging.getLogger(__name__)

FLUSH_SECONDS = 10.0
"""How long shutdown keeps retrying to record finished attempts and releases."""


class Running:
    """The jobs whose handlers run now, shared by slots, heartbeats and shutdown."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: dict[tuple[int, int], Job] = {}
        self._abandoned = False

    def add(self, jobs: Iterable[Job]) -> None:
        with self._cond:
            self._jobs.update(((job.id, job.lease.token), job) for job in jobs)

    def remove(self, job: Job) -> bool:
        """Forget a finished job; ``False`` when shutdown already abandoned it."""
        with self._cond:
            kept = self._jobs.pop((job.id, job.lease.token), None) is not None
            if not self._jobs:
                self._cond.notify_all()  # what shutdown waits for
            return kept and not self._abandoned

    def snapshot(self) -> list[Job]:
        with self._cond:
            return list(self._jobs.values())

    def wait_empty(self, timeout: float) -> None:
        """Wait until no job runs, at most ``timeout`` seconds."""
        with self._cond:
            self._cond.wait_for(lambda: not self._jobs, timeout)

    def abandon(self) -> list[Job]:
        """Take every job still running away from its slot (shutdown after grace)."""
        with self._cond:
            self._abandoned = True
            jobs = list(self._jobs.values())
            self._jobs.clear()
            return jobs


def cancel_and_stop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks of abandoned async handlers, then stop ``loop`` (call on the loop)."""
    for task in asyncio.all_tasks(loop):
        task.cancel()
    loop.call_soon(loop.stop)


class Runtime:
    """A running worker: its client, queues and background services."""

    def __init__(
        self,
        app: App,
        queues: Mapping[str, int],
        settings: Settings,
        client: Client,
        stop: threading.Event,
        hurry: threading.Event,
        *,
        dsn: str,
        owner: str,
    ) -> None:
        self.app = app
        self.settings = settings
        self.client = client
        self.owner = owner
        self.failed = False
        self.tenant_labels = metrics.TenantLabels(settings.tenants)
        self.running = Running()
        self.finisher = Finisher(client, self.crashed, settings.completion_window_seconds)
        split = capacity.Split.of(queues)
        self.slots = capacity.Slots(split, self.wake)
        self.runners = {name: QueueRunner(self, name, split.most(name)) for name in split}
        self._heartbeater = Heartbeater(client, self.running, self.crashed)
        self._listener = Listener(dsn, self.wake)
        self._sweeper = Sweeper(client, settings.recovery_interval_seconds, lambda: self.wake(None))
        self._headkeeper = HeadKeeper(client, settings.head_refresh_seconds)
        self._pruner = Pruner.from_environment(client)
        self._scheduler = Scheduler(client, self.crashed)
        self._presence = Presence(
            client,
            owner,
            {name: r.slots for name, r in self.runners.items()},
            lambda: {name: r.claimed for name, r in self.runners.items()},
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._stop = stop
        self._hurry = hurry

    def run(self) -> None:
        """Work until ``stop`` is set, then shut down (``hurry`` cuts the grace short)."""
        self.finisher.start()
        self._heartbeater.start()
        for runner in self.runners.values():
            runner.start()
        self._listener.start()
        self._sweeper.start()
        self._headkeeper.start()
        self._pruner.start()
        self._scheduler.start()
        self._presence.start()
        while not self._stop.wait(1.0):
            self._record_pool_stats()
        self._shutdown()

    def crashed(self, error: BaseException) -> None:
        """A service thread died unexpectedly: shut the worker down with a failure code."""
        log.critical("worker thread %s crashed; stopping", threading.current_thread().name, exc_info=error)
        self.failed = True
        self._stop.set()

    def wake(self, queue: str | None) -> None:
        """Nudge one queue's claimer (``None``: every queue)."""
        for name, runner in self.runners.items():
            if queue is None or queue == name:
                runner.wake(news=queue is not None)

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The shared event loop of async handlers, started on first use."""
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._loop_thread = threading.Thread(
                    target=loop.run_forever, name="fairsched-asyncio", daemon=True
                )
                self._loop_thread.start()
                self._loop = loop
            return self._loop

    def release_all(self, leases: Iterable[Lease]) -> None:
        """Give leases back (fenced), claimable at once; outages retried for a bounded time."""
        give_up = threading.Event()
        timer = threading.Timer(FLUSH_SECONDS, give_up.set)
        timer.start()
        try:
            for lease in leases:
                self._release(lease, give_up)
        finally:
            timer.cancel()

    def _release(self, lease: Lease, give_up: threading.Event) -> None:
        with job_scope(lease):  # the retries' warnings too
            held = retry_transient(
                lambda: self.client.release(lease), what=f"releasing job {lease.id}", give_up=give_up
            )
            if held:
                log.info("job %d attempt %d released", lease.id, lease.attempt)

    def _record_pool_stats(self) -> None:
        stats = self.client.pool.get_stats()
        metrics.POOL_CONNECTIONS.labels("size").set(stats.get("pool_size", 0))
        metrics.POOL_CONNECTIONS.labels("available").set(stats.get("pool_available", 0))
        metrics.POOL_CONNECTIONS.labels("waiting").set(stats.get("requests_waiting", 0))

    def _shutdown(self) -> None:
        grace = self.settings.grace_period_seconds
        log.info("worker %s stopping: no new claims; %.1fs grace for running jobs", self.owner, grace)
        deadline = time.monotonic() + grace
        self._listener.stop()
        self._sweeper.stop()
        self._headkeeper.stop()
        self._pruner.stop()
        self._scheduler.stop()
        for runner in self.runners.values():
            runner.stop_claiming(max(0.0, deadline - time.monotonic()))
        while self.running.snapshot() and time.monotonic() < deadline and not self._hurry.is_set():
            self.running.wait_empty(0.1)
        abandoned = self.running.abandon()
        for job in abandoned:
            job.mark_lost()
        if abandoned:
            log.info("releasing %d jobs still running after the grace period", len(abandoned))
            self.release_all(job.lease for job in abandoned)
        self.finisher.close(FLUSH_SECONDS)
        self._presence.stop()
        self._heartbeater.stop()
        if self._loop is not None and self._loop_thread is not None:
            self._loop.call_soon_threadsafe(cancel_and_stop, self._loop)
            self._loop_thread.join(FLUSH_SECONDS)
            if not self._loop.is_running():
                self._loop.close()  # closed here, not by the garbage collector at exit
