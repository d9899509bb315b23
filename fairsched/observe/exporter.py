"""``fairsched exporter``: the cluster-wide, database-derived gauges, served once per cluster.

Every scrape reads one snapshot (:func:`fairsched.observe.snapshot.read_snapshot`:
a few index-bounded statements in one read-only transaction, costing O(queues + tenants),
never O(jobs); per-tenant rows bounded to the top tenants plus ``other``) and turns it
into gauge families. Every declared queue gets explicit zeros, so its series do not
vanish when it drains.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from types import FrameType

import psycopg
from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fairsched.db.connection import make_pool, redact
from fairsched.errors import FairschedError
from fairsched.observe.snapshot import ExporterSettings, Snapshot, declared_tenants, read_snapshot
from fairsched.settings import Settings

log = logging.getLogger(__name__)


def _age(now: datetime, then: datetime | None) -> float:
    return max((now - then).total_seconds(), 0.0) if then is not None else 0.0


class ClusterCollector(Collector):
    """Reads a snapshot on every scrape and turns it into gauge families."""

    def __init__(self, dsn: str, settings: Settings, limits: ExporterSettings) -> None:
        self._declared = declared_tenants(settings)
        self._limits = limits
        self._pool = make_pool(dsn, max_size=2, prepare_threshold=None, settings=settings)
        self._pool.open(wait=False)

    def close(self) -> None:
        """Close the collector's connections."""
        self._pool.close()

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: the registry must not scrape the database on registration."""
        return []

    def collect(self) -> Iterable[Metric]:
        """One scrape: the gauges, plus whether reading the database worked and how long it took."""
        start = time.perf_counter()
        success = GaugeMetricFamily(
            "fairsched_exporter_scrape_success", "1 when the last scrape read the database, else 0."
        )
        duration = GaugeMetricFamily(
            "fairsched_exporter_scrape_duration_seconds", "Time the last scrape spent reading the database."
        )
        try:
            with self._pool.connection(timeout=self._limits.statement_timeout_seconds) as conn:
                snapshot = read_snapshot(conn, self._limits, self._declared)
        except (FairschedError, psycopg.Error, TimeoutError) as e:
            log.warning("exporter scrape failed: %s", redact(str(e)))
            success.add_metric([], 0)
        else:
            yield from self.families(snapshot)
            success.add_metric([], 1)
        duration.add_metric([], time.perf_counter() - start)
        yield success
        yield duration

    def families(self, snapshot: Snapshot) -> Iterator[Metric]:
        """The metric families of one snapshot."""
        now, limits = snapshot.now, self._limits
        queue_gauges = {
            key: GaugeMetricFamily(name, help_text, labels=["queue"])
            for key, name, help_text in (
                (
                    "oldest",
                    "fairsched_queue_oldest_claimable_age_seconds",
                    "Age of the oldest claimable job (pending and available now), 0 when none.",
                ),
                (
                    "claimable",
                    "fairsched_queue_claimable_jobs",
                    f"Claimable jobs, counted up to {limits.count_limit} per priority level.",
                ),
                ("running", "fairsched_queue_running_jobs", "Running jobs."),
                (
                    "near",
                    "fairsched_queue_leases_near_expiry",
                    f"Running jobs whose lease expires within {limits.near_expiry_seconds:g} s.",
                ),
                (
                    "expired",
                    "fairsched_queue_leases_expired",
                    "Running jobs whose lease has expired and that recovery has not moved yet.",
                ),
                (
                    "dead",
                    "fairsched_queue_dead_jobs",
                    f"Unresolved dead jobs, counted up to {limits.count_limit}.",
                ),
                (
                    "oldest_dead",
                    "fairsched_queue_oldest_dead_age_seconds",
                    "Time since the oldest unresolved dead job died, 0 when none.",
                ),
                (
                    "starving",
                    "fairsched_queue_starving_tenants",
                    f"Tenants with claimable work older than {limits.starving_after_seconds:g} s "
                    "(throttled tenants not counted).",
                ),
                (
                    "throttled",
                    "fairsched_queue_throttled_tenants",
                    "Tenants with claimable work that a policy's own limit (a rate limit) holds back now.",
                ),
                (
                    "blocked",
                    "fairsched_queue_blocked_aggregates",
                    f"Serial aggregates blocked by a dead job, counted up to {limits.count_limit}.",
                ),
                (
                    "gap_waiting",
                    "fairsched_queue_gap_waiting_aggregates",
                    f"Serial aggregates waiting on a missing sequence number, counted up to "
                    f"{limits.count_limit}.",
                ),
                (
                    "oldest_gap",
                    "fairsched_queue_oldest_gap_wait_seconds",
                    "How long the longest-waiting aggregate has waited on a sequence gap, 0 when none.",
                ),
                (
                    "active_tenants",
                    "fairsched_queue_active_tenants",
                    f"Tenants active in the weighted policy, counted up to {limits.count_limit}.",
                ),
            )
        }
        tenant_gauges = {
            key: GaugeMetricFamily(name, help_text, labels=["queue", "tenant"])
            for key, name, help_text in (
                (
                    "oldest",
                    "fairsched_tenant_oldest_claimable_age_seconds",
                    'Age of a tenant\'s oldest claimable job (top tenants by age; the rest as "other"), '
                    "0 while the tenant is throttled.",
                ),
                (
                    "throttled",
                    "fairsched_tenant_throttled_oldest_seconds",
                    "Age of the oldest claimable job of a tenant a policy's own limit (a rate limit) "
                    "holds back now, 0 when not throttled.",
                ),
                (
                    "running",
                    "fairsched_tenant_running_jobs",
                    'Running jobs per tenant (top tenants; the rest as "other").',
                ),
                (
                    "entitled",
                    "fairsched_tenant_entitled_share_ratio",
                    "Share of claims a tenant is entitled to: its weight over the active tenants' "
                    "weights (equal split without the weighted policy).",
                ),
            )
        }
        weight = GaugeMetricFamily(
            "fairsched_tenant_weight",
            "Weight of a top tenant in the weighted policy.",
            labels=["queue", "tenant"],
        )
        claimed = CounterMetricFamily(
            "fairsched_tenant_claimed_jobs",
            "Jobs claimed so far by a top tenant, from the weighted policy's share state.",
            labels=["queue", "tenant"],
        )
        for name, queue in sorted(snapshot.queues.items()):
            starving = sum(
                1
                for tenant in queue.tenants.values()
                if _age(now, tenant.oldest_available_at) >= limits.starving_after_seconds
            )
            throttled = sum(1 for tenant in queue.tenants.values() if tenant.throttled_available_at)
            values = {
                "oldest": _age(now, queue.oldest_available_at),
                "claimable": queue.claimable,
                "running": queue.running,
                "near": queue.near_expiry,
                "expired": queue.expired,
                "dead": queue.dead,
                "oldest_dead": _age(now, queue.oldest_dead_at),
                "starving": starving,
                "throttled": throttled,
                "blocked": queue.blocked_aggregates,
                "gap_waiting": queue.gap_waiting_aggregates,
                "oldest_gap": _age(now, queue.oldest_gap_since),
                "active_tenants": queue.active_tenants,
            }
            for key, value in values.items():
                queue_gauges[key].add_metric([name], value)
            entitled = queue.entitled_shares()
            for tenant, row in sorted(queue.labeled.items()):
                tenant_gauges["oldest"].add_metric([name, tenant], _age(now, row.oldest_available_at))
                tenant_gauges["running"].add_metric([name, tenant], row.running)
                tenant_gauges["throttled"].add_metric([name, tenant], _age(now, row.throttled_available_at))
                tenant_gauges["entitled"].add_metric([name, tenant], entitled[tenant])
            for tenant, share in sorted(queue.shares.items()):
                weight.add_metric([name, tenant], share.weight)
                claimed.add_metric([name, tenant], share.claimed_total)
        yield from queue_gauges.values()
        yield from tenant_gauges.values()
        yield weight
        yield claimed


def serve(
    settings: Settings,
    *,
    dsn: str,
    host: str = "0.0.0.0",
    port: int = 9464,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve ``/metrics`` on ``host:port`` until SIGTERM or SIGINT, then stop cleanly.
    ``on_listening`` gets the page's URL once the port is bound (port 0: the one chosen)."""
    limits = ExporterSettings.load()
    collector = ClusterCollector(dsn, settings, limits)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("exporter stopping on signal %d", signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    REGISTRY.register(collector)
    server, thread = start_http_server(port, addr=host)
    url = f"http://{host}:{server.server_address[1]}/metrics"
    log.info("exporter serving %s", url)
    if on_listening is not None:
        on_listening(url)
    try:
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        REGISTRY.unregister(collector)
        collector.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
