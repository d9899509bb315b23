"""Prometheus metrics that every process exports (prefix ``fairsched_``).

Worker-side series live here; database-derived gauges (oldest claimable age,
shares, dead jobs, …) are served once per cluster by ``fairsched exporter``.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Sequence
from datetime import datetime
from importlib import metadata
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram, Info

OTHER_TENANT = "other"
"""The label every tenant without a series of its own is counted under."""

# Wait histograms reach well past 15 s: queues wait minutes.
WAIT_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
    float("inf"),
)
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, float("inf"))

DB_OPERATION_SECONDS = Histogram(
    "fairsched_db_operation_duration_seconds",
    "Duration of fairsched database operations.",
    ["operation", "outcome"],
    buckets=FAST_BUCKETS,
)
CLAIMS = Counter("fairsched_claims_total", "Jobs claimed.", ["queue"])
COMPLETIONS = Counter("fairsched_completions_total", "Jobs completed successfully.", ["queue"])
FAILURES = Counter("fairsched_failures_total", "Failed attempts by error code.", ["queue", "error_code"])
RETRIES = Counter(
    "fairsched_retries_total", "Failed attempts scheduled for retry, by error code.", ["queue", "error_code"]
)
DEAD = Counter("fairsched_dead_total", "Jobs moved to dead by a failure.", ["queue"])
LEASE_EXPIRATIONS = Counter(
    "fairsched_lease_expirations_total", "Expired leases moved on by recovery.", ["queue"]
)
RECOVERY_FAILURES = Counter(
    "fairsched_recovery_failures_total",
    "Recovery sweeps of a queue that failed on their own (its expired leases stay until a sweep "
    "succeeds; the other queues are swept meanwhile).",
    ["queue"],
)
STALE_COMPLETIONS = Counter(
    "fairsched_stale_completions_rejected_total",
    "Completions, failures and releases rejected because the lease no longer held.",
    ["queue", "operation"],
)
HEARTBEAT_FAILURES = Counter(
    "fairsched_heartbeat_failures_total", "Heartbeats that found the lease lost.", ["queue"]
)
CANCELLATIONS = Counter(
    "fairsched_cancellations_total",
    "Cancellations: outcome cancelled (the job had not run), requested (a running job was"
    " asked to stop; counted where the cancel was made) or stopped (a worker ended a running"
    " job cancelled).",
    ["queue", "outcome"],
)
CLAIM_SECONDS = Histogram(
    "fairsched_claim_duration_seconds",
    "Duration of one claim statement.",
    ["queue"],
    buckets=FAST_BUCKETS,
)
WAIT_SECONDS = Histogram(
    "fairsched_wait_seconds",
    "Enqueue-to-start wait of claimed jobs.",
    ["queue"],
    buckets=WAIT_BUCKETS,
)
CLAIM_TO_START_SECONDS = Histogram(
    "fairsched_claim_to_start_seconds",
    "Claim-to-handler-start delay inside a worker.",
    ["queue"],
    buckets=FAST_BUCKETS,
)
RUN_SECONDS = Histogram(
    "fairsched_run_duration_seconds",
    "Handler run time per attempt.",
    ["queue", "outcome"],
    buckets=WAIT_BUCKETS,
)
SLOTS = Gauge(
    "fairsched_worker_slots",
    "Slots this worker process's split entitles each queue to (static --queue name=N, or the "
    "weighted share of --concurrency); a weighted queue may borrow idle slots past it (see slots_busy).",
    ["queue"],
)
SLOTS_BUSY = Gauge("fairsched_worker_slots_busy", "Slots running a job per queue.", ["queue"])
POOL_CONNECTIONS = Gauge(
    "fairsched_pool_connections", "Connections of this process's pool by state.", ["state"]
)
TENANT_CLAIMS = Counter(
    "fairsched_tenant_claims_total",
    'Jobs claimed per tenant (declared tenants by name, the rest as tenant="other").',
    ["queue", "tenant"],
)
TENANT_WAIT_SECONDS = Histogram(
    "fairsched_tenant_wait_seconds",
    'Enqueue-to-start wait of first attempts per tenant (declared tenants, the rest as "other").',
    ["queue", "tenant"],
    buckets=WAIT_BUCKETS,
)
BUILD_INFO = Info("fairsched_build", "fairsched version and Python runtime of this process.")
BUILD_INFO.info({"version": metadata.version("fairsched"), "python": platform.python_version()})


class TenantLabels:
    """Bounded tenant label values: declared tenants keep their name, the rest are "other".

    Declared tenants are the ones in the configuration (``[tenants.NAME]``), so every
    process labels a tenant the same way and the series count stays bounded by the
    configuration, not by the number of tenants in the database.

    >>> labels = TenantLabels(["acme", "globex"])
    >>> labels("acme"), labels("initech")
    ('acme', 'other')
    """

    def __init__(self, declared: Iterable[str], *, limit: int = 200) -> None:
        self._declared = frozenset(sorted(declared)[:limit])

    def __call__(self, tenant: str) -> str:
        return tenant if tenant in self._declared else OTHER_TENANT


class ClaimedJob(Protocol):
    """What :func:`record_claims` reads from a lease."""

    @property
    def queue(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def started_at(self) -> datetime: ...


def record_claims(leases: Sequence[ClaimedJob], labels: TenantLabels) -> None:
    """Count claimed jobs per queue and per tenant, and observe the enqueue-to-start wait
    of first attempts per queue and per tenant (each lease's wait computed once).

    Both timestamps are database time, so the wait does not depend on a worker's clock.
    """
    groups: dict[tuple[str, str], list[float | None]] = {}
    for lease in leases:
        wait = max((lease.started_at - lease.created_at).total_seconds(), 0.0) if lease.attempt == 1 else None
        groups.setdefault((lease.queue, labels(lease.tenant)), []).append(wait)
    for (queue, tenant), waits in groups.items():  # one series lookup per queue and tenant label
        CLAIMS.labels(queue).inc(len(waits))
        TENANT_CLAIMS.labels(queue, tenant).inc(len(waits))
        queue_waits, tenant_waits = WAIT_SECONDS.labels(queue), TENANT_WAIT_SECONDS.labels(queue, tenant)
        for wait in waits:
            if wait is not None:
                queue_waits.observe(wait)
                tenant_waits.observe(wait)


SCHEDULE_TICKS = Counter(
    "fairsched_schedule_ticks_total",
    "Schedule ticks this process enqueued, by schedule; caught_up is true for the latest "
    "of missed ticks (the earlier ones were skipped).",
    ["schedule", "caught_up"],
)
PRUNED_ROWS = Counter(
    "fairsched_pruned_rows_total",
    "Rows deleted past their queue's retention by this process's pruner, by kind "
    "(finished: succeeded and discarded jobs; dead: dead jobs; history: attempt records and job events).",
    ["queue", "kind"],
)
