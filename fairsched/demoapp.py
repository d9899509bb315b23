"""The demo's workload: the app its workers run, its queue, and the jobs of a run.

One tenant floods the queue with a bulk import; several small tenants follow,
with a few flaky jobs (retried), one job that fails permanently, one that
exhausts its budget for unknown errors, and an aggregate with sequence numbers.
:func:`workload` makes the jobs of a :class:`DemoPlan`, deterministically;
:mod:`fairsched.demo` runs them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fairsched.engine.enqueue import JobSpec
from fairsched.errors import InvalidInput, PermanentError, RetryableError
from fairsched.policy.registry import resolve
from fairsched.settings import QueueSettings, TenantSettings
from fairsched.worker.app import App, Job

QUEUE = "demo"
FLOOD_TENANT = "bigco"
SMALL_TENANTS = ("acme", "globex", "initech", "umbrella")
FLOOD_SHARE = 0.7
AGGREGATE_TENANT = "acme"
AGGREGATE_LENGTH = 5
WEIGHTS = {"acme": 2.0}
"""Tenant weights on the demo queue (others weigh 1): acme is entitled to twice the share."""
DEFAULT_POLICIES = ("weighted", "aging", "serial")
FLAKY_SHARE = 0.025
"""The part of the jobs that fail once or twice with a retryable error, then succeed."""
ENQUEUE_BATCH = 1000
MIN_JOBS = 4 * len(SMALL_TENANTS) + AGGREGATE_LENGTH


app = App()


@app.handler(QUEUE)
def handle(job: Job) -> None:
    """Simulated work, failing as the payload asks."""
    task = job.payload
    time.sleep(task["work"])
    if task.get("poison"):
        raise PermanentError("payload version 0 is not supported")
    if task.get("bug"):
        raise ValueError("unexpected field 'legacy_id'")
    if job.attempt <= task.get("flaky", 0):
        raise RetryableError(f"downstream timed out (attempt {job.attempt})")


def demo_queue(policies: Sequence[str] = DEFAULT_POLICIES) -> QueueSettings:
    """The demo queue: the policy stack, tenant weights, and short leases and retry
    delays so that a run takes seconds."""
    return QueueSettings(
        lease_seconds=10,
        max_runtime_seconds=60,
        max_attempts=4,
        unknown_max_attempts=2,
        backoff_base_seconds=0.1,
        backoff_max_seconds=0.5,
        notify=True,
        policies=list(policies),
        tenants={name: TenantSettings(weight=weight) for name, weight in WEIGHTS.items()},
    )


@dataclass(frozen=True)
class DemoPlan:
    """How big a demo run is."""

    jobs: int
    workers: int
    slots: int
    policies: tuple[str, ...]
    work_seconds: float
    timeout_seconds: float

    @classmethod
    def make(
        cls,
        *,
        jobs: int | None = None,
        workers: int = 2,
        slots: int = 4,
        policies: Sequence[str] = DEFAULT_POLICIES,
        quick: bool = False,
    ) -> DemoPlan:
        """The default plan (``quick``: a few seconds), with ``jobs`` when given."""
        count = jobs if jobs is not None else (400 if quick else 3000)
        if count < MIN_JOBS or workers < 1 or slots < 1:
            raise InvalidInput(f"the demo needs at least {MIN_JOBS} jobs, one worker and one slot")
        resolve(policies)
        work = 0.002 if quick else 0.01
        estimate = count * work / (workers * slots)
        return cls(count, workers, slots, tuple(policies), work, timeout_seconds=60 + 20 * estimate)


def workload(plan: DemoPlan, aggregate_key: str = "order-1") -> list[JobSpec]:
    """The jobs of a run, in enqueue order: the flood, then the small tenants' jobs.

    Deterministic for a given plan. Each run needs its own ``aggregate_key``: the
    serial policy remembers how far an aggregate got.
    """
    rng = random.Random(7)

    def task(n: int, **extra: Any) -> dict[str, Any]:
        flaky = rng.choice((1, 2)) if rng.random() < FLAKY_SHARE else 0
        return {"n": n, "work": round(plan.work_seconds * rng.uniform(0.5, 1.5), 4), "flaky": flaky, **extra}

    flood = round(plan.jobs * FLOOD_SHARE)
    jobs = [JobSpec(task(n), FLOOD_TENANT) for n in range(flood)]
    small = [JobSpec(task(n), SMALL_TENANTS[n % len(SMALL_TENANTS)]) for n in range(plan.jobs - flood)]
    aggregate = [
        JobSpec(task(0, flaky=0), AGGREGATE_TENANT, aggregate_key=aggregate_key, aggregate_seq=seq)
        for seq in range(1, AGGREGATE_LENGTH + 1)
    ]
    small[: len(aggregate)] = aggregate
    small[-1] = JobSpec(task(0, flaky=0, poison=True), "globex")
    small[-2] = JobSpec(task(0, flaky=0, bug=True), "initech")
    return jobs + small
