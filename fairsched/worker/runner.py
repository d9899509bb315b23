"""The queue runner: one queue's claimer thread and its slots.

The claimer leases a bounded batch (at most the free slots this queue may take,
:class:`~fairsched.config.capacity.Slots`) and hands each lease to a slot: a thread
for sync handlers, a task on the worker's shared event loop for async ones. No
transaction is open while a handler runs; each finished attempt goes to the
finisher. Under a backlog claims are paced (:mod:`fairsched.worker.pacing`); on
queues whose stack orders tenants and that send NOTIFY a few slots are kept for new
work, opened by a notification. Failed claims back off and retry.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue as queue_mod
import random
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING

import psycopg

from fairsched import metrics, tracing
from fairsched.db.connection import redact
from fairsched.engine import claim
from fairsched.engine.lease import Lease
from fairsched.errors import FairschedError
from fairsched.logs import job_scope
from fairsched.policy.registry import STACK_TTL_SECONDS
from fairsched.worker.app import Job
from fairsched.worker.finisher import Outcome, held_for_test
from fairsched.worker.pacing import Pacer
from fairsched.worker.service import TRANSIENT, backoff_delay, service_thread

if TYPE_CHECKING:
    from fairsched.worker.runtime import Runtime

log = logging.getLogger(__name__)

CLAIM_WINDOW = 0.005
"""Under a backlog, how long a claimer waits for half its slots to come free before
claiming fewer: a claim of many costs about what a claim of one does. Under a backlog of
jobs that run longer than a window, the pause between paced claims (:mod:`fairsched.worker.pacing`)."""
RESERVE_OPEN_CLAIMS = 2
"""How many claims a notification of new work opens a tenant-ordered queue's reserved slots to:
the one it starts at once, and one more for jobs another worker's claim held."""


class QueueRunner:
    """One queue's claimer and slots."""

    def __init__(self, worker: Runtime, name: str, slots: int) -> None:
        self.name = name
        self.slots = slots
        self._worker = worker
        self._handler = worker.app.handler_for(name)
        self._async = worker.app.is_async(name)
        self._cond = threading.Condition()
        self._busy = 0
        self.claimed = 0
        """Jobs this runner claimed since the worker started (the worker registry's count)."""
        self._hint = True
        self._backlog = False
        self._recheck = False
        self._open = 0
        self._reserve = 0
        self._reserve_slots = int(slots * worker.settings.reserve_fraction)
        self._reserve_checked = -math.inf
        self._claiming = True
        self._pacer = Pacer(slots, CLAIM_WINDOW)
        self._inbox: queue_mod.SimpleQueue[tuple[Job, float]] = queue_mod.SimpleQueue()
        self._claimer = service_thread(f"fairsched-claim-{name}", self._claim_loop, worker.crashed)
        # This queue's series, looked up once: labels() costs more than the update per job.
        self._start_hist = metrics.CLAIM_TO_START_SECONDS.labels(name)

    def start(self) -> None:
        # The queue's entitlement in the worker's split, read when scraped: it follows the split.
        metrics.SLOTS.labels(self.name).set_function(lambda: self._worker.slots.split[self.name])
        metrics.SLOTS_BUSY.labels(self.name).set_function(lambda: self._busy)  # read when scraped
        for counter in (metrics.CLAIMS, metrics.COMPLETIONS, metrics.DEAD, metrics.LEASE_EXPIRATIONS):
            counter.labels(self.name)  # explicit zeros: the series exist before the first job
        if not self._async:
            for i in range(self.slots):
                service_thread(f"fairsched-{self.name}-{i}", self._slot_loop, self._worker.crashed).start()
        self._claimer.start()

    def wake(self, news: bool = False) -> None:
        """There may be new work: claim as soon as a slot is free. ``news``: a notification
        said so; the claim goes at once, into the reserved slots too."""
        with self._cond:
            self._hint = True
            if news:
                self._open = RESERVE_OPEN_CLAIMS
            self._cond.notify_all()

    @property
    def _news(self) -> bool:
        """A notification came since the last claim: the next one goes at once."""
        return self._open == RESERVE_OPEN_CLAIMS

    def _limit(self) -> int:
        """How many slots claims may fill: all but the reserved ones unless news opened them."""
        return self.slots if self._open else self.slots - self._reserve

    def stop_claiming(self, timeout: float) -> None:
        """No new claims; wait (bounded) for a claim in flight."""
        with self._cond:
            self._claiming = False
            self._cond.notify_all()
        self._claimer.join(timeout)

    # -- claiming ----------------------------------------------------------

    def _claim_loop(self) -> None:
        failures = 0
        poll = self._worker.settings.poll_interval_seconds
        while True:
            with suppress(FairschedError, psycopg.Error):  # the claim meets it too, and backs off
                self._reserve_check()
            with self._cond:
                deadline = time.monotonic() + poll * random.uniform(0.9, 1.1)
                while self._claiming and not (self._hint and self._busy < self._limit()):
                    remaining = deadline - time.monotonic()
                    if not self._hint and remaining <= 0:
                        self._hint = True
                        continue
                    self._cond.wait(remaining if not self._hint else poll)
                paced = self._backlog and self._pacer.paced and not self._news
                if paced:
                    self._cond.wait_for(
                        lambda: self._news or not self._claiming, self._pacer.pause(time.monotonic())
                    )
                elif self._backlog and self._busy > self.slots // 2 and not self._news:
                    self._cond.wait_for(
                        lambda: self._busy <= self.slots // 2 or not self._claiming, CLAIM_WINDOW
                    )
                if not self._claiming:
                    return
                want = min(self._limit() - self._busy, claim.MAX_BATCH)
                if paced and not self._news:
                    want = min(want, self._pacer.allowance(time.monotonic()))
                free = self._worker.slots.take(self.name, want)
                if not free:  # the free slots are owed to other queues; woken when one comes free
                    self._cond.wait(poll)
                    continue
                self._hint = False
                self._open = max(0, self._open - 1)
            try:
                leases = self._claim(free)
            except (FairschedError, psycopg.Error) as e:
                self._worker.slots.claimed(self.name, free, 0)
                delay = backoff_delay(failures, cap=min(5.0, max(poll, 0.5)))
                if failures == 0:
                    level = logging.WARNING if isinstance(e, TRANSIENT) else logging.ERROR
                    log.log(level, "claiming %s failed (%s); backing off", self.name, redact(str(e)))
                failures += 1
                with self._cond:
                    self._hint = True
                    self._cond.wait_for(lambda: not self._claiming, delay)
                continue
            if failures:
                log.info("claiming %s works again after %d failed attempts", self.name, failures)
                failures = 0
            # Any claim that leased something may have left more: a tenant-first claim comes
            # back short when a tenant it dealt jobs to had fewer (or another claimer held
            # them) while other tenants still have plenty. It can even come back empty,
            # when every tenant it dealt jobs to was dry and held by another claim: under
            # a backlog an empty claim is checked once more; two in a row say none left.
            self._recheck = not leases and self._backlog and not self._recheck
            more = bool(leases) or self._recheck
            self._worker.slots.claimed(self.name, free, len(leases), more=more)
            self._dispatch(leases, more=more)

    def _claim(self, limit: int) -> list[Lease]:
        start = time.perf_counter()
        hold = held_for_test("claim")
        if hold:  # test hook: the claim in a transaction held open (see held_for_test)
            with self._worker.client.claim_pool.connection() as conn, conn.transaction():
                leases = claim.jobs_claim(conn, self.name, owner=self._worker.owner, limit=limit)
                time.sleep(hold)
        else:
            leases = self._worker.client.claim(self.name, owner=self._worker.owner, limit=limit)
        metrics.CLAIM_SECONDS.labels(self.name).observe(time.perf_counter() - start)
        return leases

    def _reserve_check(self) -> None:
        """Reserve slots for new work on queues that order tenants and send NOTIFY (a
        new tenant's job goes first there, and the notification opens the slots), read
        from the queue's stack at most once a second."""
        now = time.monotonic()
        if now - self._reserve_checked < STACK_TTL_SECONDS:
            return
        stack = self._worker.client.queue_stack(self.name)
        with self._cond:
            self._reserve = self._reserve_slots if stack.tenant_ordered and stack.notify else 0
        self._reserve_checked = now

    def _dispatch(self, leases: list[Lease], *, more: bool) -> None:
        claimed = time.monotonic()
        with self._cond:
            self._hint = self._hint or more
            self._backlog = more
            accepted = self._claiming
            if accepted:
                self._busy += len(leases)
                self._pacer.started(len(leases))
        if not accepted:
            self._worker.release_all(leases)
            return
        if not leases:
            return
        self.claimed += len(leases)
        metrics.record_claims(leases, self._worker.tenant_labels)
        jobs = [Job(lease, claimed) for lease in leases]
        self._worker.running.add(jobs)
        for job in jobs:
            if self._async:
                asyncio.run_coroutine_threadsafe(self._run_async(job, claimed), self._worker.event_loop())
            else:
                self._inbox.put((job, claimed))

    # -- running -----------------------------------------------------------

    def _slot_loop(self) -> None:
        while True:
            job, claimed = self._inbox.get()
            start = time.monotonic()
            self._start_hist.observe(start - claimed)
            error: BaseException | None = None
            try:
                with job_scope(job.lease), tracing.run_span(job.lease):  # logs and spans: its job's
                    self._handler(job)
            except BaseException as e:
                error = e
            self._finished(job, error, time.monotonic() - start)

    async def _run_async(self, job: Job, claimed: float) -> None:
        start = time.monotonic()
        self._start_hist.observe(start - claimed)
        error: BaseException | None = None
        try:
            with job_scope(job.lease), tracing.run_span(job.lease):  # this task's own context
                task, loop = asyncio.current_task(), asyncio.get_running_loop()
                if task is not None:  # a cancel request cancels this task, inside the try
                    job.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))
                await self._handler(job)
        except BaseException as e:
            error = e
        self._finished(job, error, time.monotonic() - start)

    def _finished(self, job: Job, error: BaseException | None, seconds: float) -> None:
        if self._worker.running.remove(job):
            self._worker.finisher.put(Outcome(job, error, seconds))
        with self._cond:
            self._busy -= 1
            self._pacer.finished(seconds)
            if self._busy in (self.slots - 1, self._limit() - 1) or self._busy <= self.slots // 2:
                self._cond.notify_all()  # what the claimer waits for: a first free slot, or half
        self._worker.slots.finished(self.name)
