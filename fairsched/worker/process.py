"""The worker runtime: pooled slots per queue, claiming, heartbeats and batched completions.

One process holds one connection pool. Per queue a claimer thread leases a
bounded batch (at most its free slots) and hands each lease to a slot: a
thread for sync handlers, a task on one shared event loop for async ones. No
transaction is open while a handler runs. Finished attempts go to one
finisher thread that records successes and failures in batches (one statement
each); a completion whose lease no longer held is never reported
as done. One heartbeat thread renews the leases of jobs whose progress
advanced. Wake-ups come from ``LISTEN`` and from a periodic poll; a recovery
sweeper moves expired leases on, and a head keeper raises the claim heads past
the jobs claimed.

SIGTERM/SIGINT stops claiming, lets running jobs finish within the grace
period, then releases (fenced) what still runs; a second signal cuts the grace
short. Database outages never end the worker: claims, completions and
heartbeats back off and retry.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
import os
import queue as queue_mod
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from types import FrameType
from typing import NamedTuple, TypeVar

import psycopg
from psycopg.conninfo import make_conninfo

from fairsched import metrics
from fairsched.client import Client
from fairsched.config import capacity
from fairsched.db.connection import connect, operation, redact
from fairsched.db.sql import QUERIES
from fairsched.engine import claim, enqueue, retry
from fairsched.engine.lease import Lease
from fairsched.errors import ConfigError, DatabaseError, FairschedError, InvalidInput, UnknownQueue
from fairsched.policy.registry import STACK_TTL_SECONDS
from fairsched.settings import Settings
from fairsched.worker.app import App, Job
from fairsched.worker.headkeeper import HeadKeeper
from fairsched.worker.listener import Listener, backoff_delay
from fairsched.worker.pacing import Pacer
from fairsched.worker.service import Crash, Service, service_thread
from fairsched.worker.sweeper import Sweeper

log = logging.getLogger(__name__)

T = TypeVar("T")

TRANSIENT: tuple[type[BaseException], ...] = (DatabaseError, psycopg.Error)
"""Database failures a worker survives by backing off and retrying."""

MAX_SLOTS = 1000
COMPLETION_BATCH = 500
"""Most finished attempts recorded in one round of the finisher."""
FLUSH_SECONDS = 10.0
"""How long shutdown keeps retrying to record finished attempts and releases."""
APPLICATION_NAME = "fairsched-worker"
IDLE_TICK = 0.25
"""Longest pause of the heartbeat thread (a new job's first renewal is due at lease/3)."""
CLAIM_WINDOW = 0.005
"""Under a backlog, how long a claimer waits for half its slots to come free before
claiming fewer: a claim of many costs about what a claim of one does. Under a backlog of
jobs that run longer than a window, the pause between paced claims (:mod:`fairsched.worker.pacing`)."""
RESERVE_OPEN_CLAIMS = 2
"""How many claims a notification of new work opens a weighted queue's reserved slots to:
the one it starts at once, and one more for jobs another worker's claim held."""


# -- entry points used by the CLI ------------------------------------------


def load_app(spec: str) -> App:
    """Import ``module:attribute`` and return the :class:`App` it names.

    The current directory is importable, as when running ``python -m``.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app {spec!r}: expected module:attribute, e.g. mypkg.jobs:app")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"--app {spec!r}: cannot import {module_name!r}: {e}") from None
    target = getattr(module, attr, None)
    if not isinstance(target, App):
        kind = "missing" if target is None else f"a {type(target).__name__}"
        raise ConfigError(f"--app {spec!r}: {module_name}.{attr} is {kind}, not a fairsched App")
    return target


def parse_queue_slots(items: Iterable[str]) -> dict[str, int]:
    """``["emails=8", "reports=2"]`` → ``{"emails": 8, "reports": 2}``."""
    slots: dict[str, int] = {}
    for item in items:
        name, sep, count = item.partition("=")
        if not sep:
            raise InvalidInput(f"--queue {item!r}: expected queue=slots, e.g. emails=8")
        enqueue.check_queue_name(name)
        if not count.strip().isdigit() or not 1 <= int(count) <= MAX_SLOTS:
            raise InvalidInput(f"--queue {item!r}: slots must be a whole number from 1 to {MAX_SLOTS}")
        if name in slots:
            raise InvalidInput(f"--queue {name!r} given twice")
        slots[name] = int(count)
    if not slots:
        raise InvalidInput("give at least one --queue queue=slots")
    return slots


def run_worker(
    app: App,
    queues: Mapping[str, int],
    settings: Settings,
    *,
    dsn: str,
    owner: str | None = None,
    metrics_port: int | None = None,
) -> int:
    """Run a worker in this (main) thread until SIGTERM/SIGINT; returns the exit code."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    owner = enqueue.check_label("owner", owner or f"{socket.gethostname()}:{os.getpid()}", 200)
    worker = Worker(app, queues, settings, dsn=dsn, owner=owner)
    worker.install_signal_handlers()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port)
    return worker.run()


# -- the runtime -------------------------------------------------------------


class Outcome(NamedTuple):
    """A finished attempt, waiting to be recorded: ``error`` is ``None`` on success."""

    job: Job
    error: BaseException | None
    run_seconds: float


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


def retry_transient(fn: Callable[[], T], *, what: str, give_up: threading.Event) -> T | None:
    """``fn()``, retried with backoff on database failures until it works or ``give_up`` is set."""
    failures = 0
    while True:
        try:
            return fn()
        except TRANSIENT as e:
            if give_up.is_set():
                log.error("%s abandoned: %s", what, redact(str(e)))
                return None
            delay = backoff_delay(failures, cap=5.0)
            if failures == 0:
                log.warning("%s failed (%s); retrying", what, redact(str(e)))
            failures += 1
            give_up.wait(delay)


class Finisher:
    """Records finished attempts in batches: one statement for the successes of a round,
    one for its failures. A round starts at most once per ``window`` seconds: what finishes
    meanwhile joins it, and the first after a quiet window goes at once."""

    def __init__(self, client: Client, on_crash: Crash, window: float) -> None:
        self._client = client
        self._window = window
        self._inbox: queue_mod.SimpleQueue[Outcome | None] = queue_mod.SimpleQueue()
        self._give_up = threading.Event()
        self._thread = service_thread("fairsched-finisher", self._run, on_crash)

    def start(self) -> None:
        self._thread.start()

    def put(self, outcome: Outcome) -> None:
        self._inbox.put(outcome)

    def close(self, timeout: float) -> None:
        """Record what is queued, retrying outages for at most ``timeout`` seconds."""
        self._inbox.put(None)
        self._thread.join(timeout)
        self._give_up.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        closing = False
        last_round = -math.inf
        while not closing:
            first = self._inbox.get()
            batch: list[Outcome] = []
            if first is None:
                closing = True
            else:
                batch.append(first)
                # Sleeping, not waiting on the inbox: a wait would wake for every outcome.
                time.sleep(max(0.0, last_round + self._window - time.monotonic()))
            while len(batch) < COMPLETION_BATCH:
                try:
                    item = self._inbox.get_nowait()
                except queue_mod.Empty:
                    break
                if item is None:
                    closing = True
                else:
                    batch.append(item)
            last_round = time.monotonic()
            self._complete([o for o in batch if o.error is None])
            self._fail([o for o in batch if o.error is not None])

    def _complete(self, outcomes: list[Outcome]) -> None:
        if not outcomes:
            return
        leases = [o.job.lease for o in outcomes]
        done = retry_transient(
            lambda: self._client.complete_many(leases), what="recording completions", give_up=self._give_up
        )
        succeeded: dict[str, list[float]] = {}
        for outcome in outcomes:
            queue = outcome.job.queue
            if done is not None and outcome.job.id in done:
                succeeded.setdefault(queue, []).append(outcome.run_seconds)
            else:
                metrics.RUN_SECONDS.labels(queue, "lost").observe(outcome.run_seconds)
                log.warning(
                    "job %d attempt %d: lease lost before its completion was recorded; not done",
                    outcome.job.id,
                    outcome.job.attempt,
                )
        for queue, seconds in succeeded.items():  # one series lookup per queue and round
            metrics.COMPLETIONS.labels(queue).inc(len(seconds))
            run_seconds = metrics.RUN_SECONDS.labels(queue, "succeeded")
            for value in seconds:
                run_seconds.observe(value)

    def _fail(self, outcomes: list[Outcome]) -> None:
        if not outcomes:
            return
        failures = [(o.job.lease, o.error or "") for o in outcomes]
        results = retry_transient(
            lambda: self._client.fail_many(failures), what="recording failures", give_up=self._give_up
        )
        for outcome in outcomes:
            job, error = outcome.job, outcome.error
            code = retry.error_code(error) if error is not None else "error"
            result = results.get(job.id) if results is not None else None
            if result is None or not result.held:
                metrics.RUN_SECONDS.labels(job.queue, "lost").observe(outcome.run_seconds)
                log.warning("job %d attempt %d failed (%s); lease lost first", job.id, job.attempt, code)
                continue
            metrics.RUN_SECONDS.labels(job.queue, "failed").observe(outcome.run_seconds)
            metrics.FAILURES.labels(job.queue, code).inc()
            if result.status == "dead":
                metrics.DEAD.labels(job.queue).inc()
            else:
                metrics.RETRIES.labels(job.queue, code).inc()
            log.info("job %d attempt %d failed (%s): now %s", job.id, job.attempt, code, result.status)


class Heartbeater(Service):
    """Renews the leases of running jobs whose reported progress advanced."""

    def __init__(self, client: Client, running: Running, on_crash: Crash) -> None:
        super().__init__("fairsched-heartbeat", on_crash)
        self._client = client
        self._running = running

    def _run(self) -> None:
        while not self._stop.is_set():
            jobs = self._running.snapshot()
            for job in jobs:
                self._beat(job)
            shortest = min((job.lease.lease_seconds for job in jobs), default=IDLE_TICK * 6)
            self._stop.wait(min(IDLE_TICK, max(0.05, shortest / 6)))

    def _beat(self, job: Job) -> None:
        due, value = job.heartbeat_due(time.monotonic())
        if not due or job.lost:
            return
        try:
            held = self._client.heartbeat(job.lease, progress=value)
        except TRANSIENT as e:
            log.warning("heartbeat of job %d failed (%s); retrying", job.id, redact(str(e)))
            return
        if held:
            job.renewed(value, time.monotonic())
        else:
            job.mark_lost()
            log.warning("job %d attempt %d: lease lost (heartbeat refused)", job.id, job.attempt)


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
        metrics.SLOTS.labels(self.name).set(self.slots)
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
            self._reserve = self._reserve_slots if stack.weighted and stack.notify else 0
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
                self._handler(job)
            except BaseException as e:
                error = e
            self._finished(job, error, time.monotonic() - start)

    async def _run_async(self, job: Job, claimed: float) -> None:
        start = time.monotonic()
        self._start_hist.observe(start - claimed)
        error: BaseException | None = None
        try:
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
        self._heartbeater.stop()
        if self._loop is not None and self._loop_thread is not None:
            self._loop.call_soon_threadsafe(cancel_and_stop, self._loop)
            self._loop_thread.join(FLUSH_SECONDS)
            if not self._loop.is_running():
                self._loop.close()  # closed here, not by the garbage collector at exit


class Worker:
    """One worker process: waits for its database, runs, and stops on a signal."""

    def __init__(
        self, app: App, queues: Mapping[str, int], settings: Settings, *, dsn: str, owner: str
    ) -> None:
        for name in queues:
            app.handler_for(name)
        self.app = app
        self.queues = capacity.Split.of(queues)
        self.settings = settings
        self.owner = owner
        self._dsn = dsn
        self._stop = threading.Event()
        self._hurry = threading.Event()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: shut down gracefully; a second one skips the rest of the grace."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()

    def stop(self) -> None:
        """Ask the worker to shut down, as SIGTERM does."""
        self._stop.set()

    def run(self) -> int:
        """Run until stopped; returns the exit code."""
        names = ", ".join(f"{name}={slots}" for name, slots in self.queues.items())
        log.info("worker %s starting: queues %s on %s", self.owner, names, redact(self._dsn))
        client = self._connect()
        if client is None:
            return 0
        runtime = Runtime(
            self.app,
            self.queues,
            self.settings,
            client,
            self._stop,
            self._hurry,
            dsn=self._dsn,
            owner=self.owner,
        )
        try:
            runtime.run()
        finally:
            client.close()
        log.info("worker %s stopped", self.owner)
        return 1 if runtime.failed else 0

    def _connect(self) -> Client | None:
        """A client with its pool open once every queue is found declared, waiting out
        outages; ``None`` when stopped first. Raises :class:`UnknownQueue`."""
        failures = 0
        while not self._stop.is_set():
            client: Client | None = None
            try:
                missing = self._undeclared_queues()
                if missing:
                    raise UnknownQueue(missing[0])
                pool_size = self.settings.pool_max_size or sum(self.queues.values()) + 4
                dsn = make_conninfo(self._dsn, application_name=APPLICATION_NAME)
                client = Client(dsn, settings=self.settings, pool_size=pool_size)
                client.pool  # noqa: B018 - opens the pool, or fails now
                return client
            except TRANSIENT as e:
                if client is not None:
                    client.close()
                delay = backoff_delay(failures, cap=5.0)
                log.warning("database not reachable (%s); retrying in %.1fs", redact(str(e)), delay)
                failures += 1
                self._stop.wait(delay)
        return None

    def _undeclared_queues(self) -> list[str]:
        with connect(self._dsn) as conn, operation("queue_get"):
            return [
                name
                for name in self.queues
                if conn.execute(QUERIES["queue_get"], {"name": name}).fetchone() is None
            ]
