"""What-if: replay a workload through the real claim on a scratch database, on a virtual clock.

A :class:`Plan` is a queue setting (policy stack, parameters, tenant weights and
caps), a number of slots, a horizon and a list of arrivals (virtual time, tenant,
run time, priority, aggregate). :func:`replay` plays it as a discrete-event
simulation: the next event is the earliest arrival or completion; arrivals are
enqueued and completions recorded with the real statements, then free slots
claim with the real composed claim (``Client.claim``), exactly as workers do.
Only time is virtual: waits are measured between virtual instants, and the two
policy inputs that read the clock are given virtual values (the aging key at
enqueue, the run time charged at completion). See ``docs/simulate.md``; the plans
come from :mod:`fairsched.simplan`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairsched.client import Client
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import Lease
from fairsched.policy.owned import owned_effective
from fairsched.settings import QueueSettings

OWNER = "fairsched-simulate"
LEASE_SECONDS = 86_400.0
"""Leases of simulated claims: long enough that no real time passing expires one."""


@dataclass(frozen=True)
class Arrival:
    """One job of the workload: when it arrives (virtual seconds), whose, how long it runs."""

    at: float
    tenant: str
    seconds: float
    priority: int = 0
    aggregate_key: str | None = None
    aggregate_seq: int | None = None


@dataclass(frozen=True)
class Plan:
    """Everything one replay needs."""

    queue: QueueSettings
    slots: int
    horizon: float
    starving_after: float
    arrivals: Sequence[Arrival]


# -- the replay ------------------------------------------------------------------------


@dataclass
class TenantFigures:
    """What one tenant saw in one replay."""

    jobs: int = 0
    claimed: int = 0
    busy_seconds: float = 0.0
    waits: list[float] = field(default_factory=list)
    late: int = 0
    starved_seconds: float = 0.0
    share: float = 0.0
    time_share: float = 0.0
    p50_wait: float = 0.0
    p99_wait: float = 0.0
    max_wait: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, without the raw waits."""
        return {k: v for k, v in vars(self).items() if k != "waits"}


@dataclass
class Outcome:
    """One replay's figures per tenant; waits of jobs unclaimed at the horizon are censored there."""

    slots: int
    policies: list[str]
    horizon: float
    claims: int
    tenants: dict[str, TenantFigures]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "slots": self.slots,
            "policies": self.policies,
            "horizon_seconds": self.horizon,
            "claims": self.claims,
            "tenants": {name: t.as_dict() for name, t in sorted(self.tenants.items())},
        }


def replay(client: Client, queue: str, plan: Plan) -> Outcome:
    """Play ``plan`` on ``queue`` (declared here) of a scratch database; returns the figures."""
    client.declare_queue(queue, plan.queue)
    aging = owned_effective(plan.queue, "aging_interval_seconds")
    runtime_charge = owned_effective(plan.queue, "charge") == "runtime"
    figures = {a.tenant: TenantFigures() for a in plan.arrivals}
    arrived: dict[int, Arrival] = {}
    starving: dict[str, list[tuple[float, float]]] = {name: [] for name in figures}
    running: list[tuple[float, int, Lease, float]] = []
    free, index, claims, now = plan.slots, 0, 0, 0.0
    while True:
        next_arrival = plan.arrivals[index].at if index < len(plan.arrivals) else math.inf
        next_done = running[0][0] if running else math.inf
        now = min(next_arrival, next_done)
        if now >= plan.horizon:
            break
        done: list[Lease] = []
        seconds: list[float] = []
        while running and running[0][0] <= now:
            _end, _id, lease, ran = heapq.heappop(running)
            done.append(lease)
            seconds.append(ran)
        if done:
            if runtime_charge:
                _execute(client, "simulate_jobs_backdate", {"ids": [x.id for x in done], "seconds": seconds})
            client.complete_many(done)
            free += len(done)
        batch: list[Arrival] = []
        while index < len(plan.arrivals) and plan.arrivals[index].at <= now:
            batch.append(plan.arrivals[index])
            index += 1
        if batch:
            specs = [JobSpec({}, a.tenant, a.priority, a.aggregate_key, a.aggregate_seq) for a in batch]
            ids = client.enqueue_many(queue, specs)
            arrived.update(zip(ids, batch, strict=True))
            for a in batch:
                figures[a.tenant].jobs += 1
            keys = [a.at - a.priority * aging for a in batch]
            _execute(client, "simulate_jobs_age", {"ids": ids, "keys": keys})
        if free > 0:
            leases = client.claim(queue, owner=OWNER, limit=free, lease_seconds=LEASE_SECONDS)
            free -= len(leases)
            claims += len(leases)
            for lease in leases:
                job = arrived.pop(lease.id)
                wait = now - job.at
                tenant = figures[job.tenant]
                tenant.claimed += 1
                tenant.busy_seconds += min(job.seconds, plan.horizon - now)
                tenant.waits.append(wait)
                if wait > plan.starving_after:
                    starving[job.tenant].append((job.at + plan.starving_after, now))
                heapq.heappush(running, (now + job.seconds, lease.id, lease, job.seconds))
    for job in arrived.values():
        figures[job.tenant].waits.append(plan.horizon - job.at)
        if plan.horizon - job.at > plan.starving_after:
            starving[job.tenant].append((job.at + plan.starving_after, plan.horizon))
    busy = sum(t.busy_seconds for t in figures.values())
    for name, tenant in figures.items():
        tenant.share = tenant.claimed / claims if claims else 0.0
        tenant.time_share = tenant.busy_seconds / busy if busy else 0.0
        tenant.late = sum(1 for w in tenant.waits if w > plan.starving_after)
        tenant.starved_seconds = union_length(starving[name])
        tenant.p50_wait = percentile(tenant.waits, 0.50)
        tenant.p99_wait = percentile(tenant.waits, 0.99)
        tenant.max_wait = max(tenant.waits, default=0.0)
    return Outcome(plan.slots, list(plan.queue.policies), plan.horizon, claims, figures)


def _execute(client: Client, name: str, params: Mapping[str, Any]) -> None:
    with client.connection() as conn:
        conn.execute(QUERIES[name], params)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (0 for no values).

    >>> percentile([1, 2, 3, 4], 0.5), percentile([1, 2, 3, 4], 0.99)
    (2, 4)
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def union_length(spans: Iterable[tuple[float, float]]) -> float:
    """Total length covered by intervals.

    >>> union_length([(0, 2), (1, 3), (5, 6)])
    4.0
    """
    total, end = 0.0, -math.inf
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def simulate(admin_dsn: str, plans: Mapping[str, Plan]) -> dict[str, Outcome]:
    """Replay each named plan on its own queue of one scratch database (dropped after)."""
    from fairsched.bench import scratch_db

    outcomes: dict[str, Outcome] = {}
    with scratch_db(admin_dsn) as dsn, Client(dsn) as client:
        for index, (name, plan) in enumerate(plans.items()):
            outcomes[name] = replay(client, f"simulate-{index}", plan)
    return outcomes
