"""Prometheus metrics that every process exports (prefix ``fairsched_``).

Worker-side series live here; database-derived gauges (oldest claimable age,
shares, dead jobs, …) are served once per cluster by ``fairsched exporter``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
RETRIES = Counter("fairsched_retries_total", "Failed attempts scheduled for retry.", ["queue"])
DEAD = Counter("fairsched_dead_total", "Jobs moved to dead by a failure.", ["queue"])
LEASE_EXPIRATIONS = Counter(
    "fairsched_lease_expirations_total", "Expired leases moved on by recovery.", ["queue"]
)
STALE_COMPLETIONS = Counter(
    "fairsched_stale_completions_rejected_total",
    "Completions, failures and releases rejected because the lease no longer held.",
    ["queue", "operation"],
)
HEARTBEAT_FAILURES = Counter(
    "fairsched_heartbeat_failures_total", "Heartbeats that found the lease lost.", ["queue"]
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
SLOTS = Gauge("fairsched_worker_slots", "Slots of this worker process per queue.", ["queue"])
SLOTS_BUSY = Gauge("fairsched_worker_slots_busy", "Slots running a job per queue.", ["queue"])
POOL_CONNECTIONS = Gauge(
    "fairsched_pool_connections", "Connections of this process's pool by state.", ["state"]
)
