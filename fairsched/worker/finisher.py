"""The finisher: records finished attempts in batches, one statement per outcome a round.

Slots hand each finished attempt (:class:`Outcome`) to one finisher thread. A round
records its successes with one statement and its failures with another; a completion
whose lease no longer held is counted as lost, never as done. Outages are retried with
backoff until :meth:`Finisher.close` gives up.
"""

from __future__ import annotations

import logging
import math
import os
import queue as queue_mod
import threading
import time
from typing import NamedTuple

from fairsched import metrics
from fairsched.client import Client
from fairsched.engine import retry
from fairsched.engine.lease import Lease, leases_complete
from fairsched.logs import job_scope
from fairsched.worker.app import Job
from fairsched.worker.service import Crash, retry_transient, service_thread

log = logging.getLogger(__name__)

COMPLETION_BATCH = 500
"""Most finished attempts recorded in one round of the finisher."""

_TEST_HOLDS_TAKEN: set[str] = set()
_TEST_HOLDS_LOCK = threading.Lock()


def held_for_test(what: str) -> float:
    """Test hook, never set in production (``tests/faults/test_stalls.py``): the seconds in
    ``FAIRSCHED_TEST_HOLD_<WHAT>_SECONDS`` the first time this process asks, else 0. The
    worker then keeps that transaction (``claim``: its first claim; ``completion``: its first
    round of completions) open that long after its statement, so a test can freeze the
    process inside it."""
    with _TEST_HOLDS_LOCK:
        if what in _TEST_HOLDS_TAKEN:
            return 0.0
        _TEST_HOLDS_TAKEN.add(what)
    return float(os.environ.get(f"FAIRSCHED_TEST_HOLD_{what.upper()}_SECONDS") or 0)


class Outcome(NamedTuple):
    """A finished attempt, waiting to be recorded: ``error`` is ``None`` on success."""

    job: Job
    error: BaseException | None
    run_seconds: float


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
            lambda: self._complete_many(leases), what="recording completions", give_up=self._give_up
        )
        succeeded: dict[str, list[float]] = {}
        for outcome in outcomes:
            queue = outcome.job.queue
            if done is not None and outcome.job.id in done:
                succeeded.setdefault(queue, []).append(outcome.run_seconds)
            else:
                metrics.RUN_SECONDS.labels(queue, "lost").observe(outcome.run_seconds)
                with job_scope(outcome.job.lease):
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

    def _complete_many(self, leases: list[Lease]) -> set[int]:
        hold = held_for_test("completion")
        if not hold:
            return self._client.complete_many(leases)
        with self._client.connection() as conn, conn.transaction():  # test hook, see held_for_test
            done = leases_complete(conn, leases)
            time.sleep(hold)
        return done

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
                with job_scope(job.lease):
                    log.warning("job %d attempt %d failed (%s); lease lost first", job.id, job.attempt, code)
                continue
            if result.status == "cancelled":  # a cancel request ended it (see engine.cancel)
                metrics.RUN_SECONDS.labels(job.queue, "cancelled").observe(outcome.run_seconds)
                metrics.CANCELLATIONS.labels(job.queue, "stopped").inc()
                with job_scope(job.lease):
                    log.info("job %d attempt %d stopped (%s): now cancelled", job.id, job.attempt, code)
                continue
            metrics.RUN_SECONDS.labels(job.queue, "failed").observe(outcome.run_seconds)
            metrics.FAILURES.labels(job.queue, code).inc()
            if result.status == "dead":
                metrics.DEAD.labels(job.queue).inc()
            else:
                metrics.RETRIES.labels(job.queue, code).inc()
            with job_scope(job.lease):
                log.info("job %d attempt %d failed (%s): now %s", job.id, job.attempt, code, result.status)
