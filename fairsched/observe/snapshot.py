"""The cluster snapshot: what one scrape reads, in one read-only transaction.

:func:`read_snapshot` runs a few index-bounded statements (``fairsched/db/sql/exporter.sql``)
whose cost depends on the number of queues, tenants, priority levels and the configured
limits (:class:`ExporterSettings`), never on the size of the backlog. Every tenant's
oldest claimable job is read exactly (one index descent per tenant and priority level);
the labelled rows are bounded (:func:`bound_tenants`): the ``top_tenants`` tenants with
the oldest claimable work (plus the tenants declared in the configuration) keep their
name, every other tenant is summed up under ``tenant="other"``. A tenant a policy of its
queue's stack holds back on its own limit (the policy's
:class:`~fairsched.policy.Throttle`, e.g. a rate limit's budget below one job) is
*throttled*: its oldest claimable job counts apart (``throttled_available_at``), so
waiting on its own limit is not starving. The exporter
(:mod:`fairsched.observe.exporter`) and ``fairsched status`` (:mod:`fairsched.observe.status`)
both read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from fairsched import bounds
from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.errors import ConfigError
from fairsched.metrics import OTHER_TENANT
from fairsched.policy.owned import level_query, level_signature, throttles
from fairsched.settings import Settings, describe_validation_error


class ExporterSettings(BaseSettings):
    """Limits of one scrape, from ``FAIRSCHED_EXPORTER__*`` variables."""

    model_config = SettingsConfigDict(env_prefix="FAIRSCHED_EXPORTER__", extra="ignore")

    top_tenants: int = Field(20, ge=0, le=1000, description="tenants per queue with series of their own")
    starving_after_seconds: float = Field(
        60.0, gt=0, le=bounds.AGING_INTERVAL_MAX_SECONDS, description="claimable this long = starving"
    )
    near_expiry_seconds: float = Field(
        5.0, gt=0, le=bounds.LEASE_MAX_SECONDS, description="a lease expiring this soon is near expiry"
    )
    count_limit: int = Field(10_000, gt=0, le=10_000_000, description="counts stop here (per priority level)")
    max_tenant_levels: int = Field(
        50_000, gt=0, le=1_000_000, description="(tenant, priority level) pairs walked per queue"
    )
    max_priority_levels: int = Field(100, gt=0, le=10_000, description="priority levels walked per queue")
    statement_timeout_seconds: float = Field(5.0, gt=0, le=bounds.PROCESS_INTERVAL_MAX_SECONDS)

    @classmethod
    def load(cls) -> ExporterSettings:
        """The limits from the environment; :class:`ConfigError` naming every bad variable."""
        try:
            return cls()
        except ValidationError as e:
            raise ConfigError(f"FAIRSCHED_EXPORTER__* variables: {describe_validation_error(e)}") from None


@dataclass
class TenantRow:
    """What one scrape knows about a tenant (or the tenants summed under a label) in a
    queue: its oldest claimable job, apart when it is throttled, and its running jobs."""

    oldest_available_at: datetime | None = None
    running: int = 0
    throttled_available_at: datetime | None = None

    def merge(self, other: TenantRow) -> None:
        """Add ``other`` into this row: the oldest of both, the sum of running jobs."""
        self.oldest_available_at = _older(self.oldest_available_at, other.oldest_available_at)
        self.running += other.running
        self.throttled_available_at = _older(self.throttled_available_at, other.throttled_available_at)

    def throttle(self) -> None:
        """A policy holds the tenant back: its claimable work waits on its own limit."""
        self.throttled_available_at = _older(self.throttled_available_at, self.oldest_available_at)
        self.oldest_available_at = None


@dataclass(frozen=True)
class TenantShare:
    """A tenant's row of the weighted policy's share state."""

    weight: float
    active: bool
    claimed_total: int


@dataclass
class QueueSnapshot:
    """One queue as read by one scrape; ``tenants`` holds every tenant with claimable or
    running work (one row each: O(tenants)), ``labeled`` the bounded rows exported."""

    oldest_available_at: datetime | None = None
    claimable: int = 0
    running: int = 0
    near_expiry: int = 0
    expired: int = 0
    dead: int = 0
    oldest_dead_at: datetime | None = None
    blocked_aggregates: int = 0
    gap_waiting_aggregates: int = 0
    oldest_gap_since: datetime | None = None
    active_tenants: int = 0
    active_weight: float = 0.0
    tenants: dict[str, TenantRow] = field(default_factory=dict)
    labeled: dict[str, TenantRow] = field(default_factory=dict)
    shares: dict[str, TenantShare] = field(default_factory=dict)

    def entitled_shares(self) -> dict[str, float]:
        """Each label's entitled share of claims.

        With weighted share state: a tenant's weight over the weights of the active
        tenants, "other" the rest. Without it (no weighted policy on the queue): an
        equal split among the tenants with claimable or running work seen by the scrape.
        """
        if self.active_weight > 0:
            named = {
                label: (share.weight / self.active_weight if share.active else 0.0)
                for label, share in self.shares.items()
            }
            result = {label: named.get(label, 0.0) for label in self.labeled}
            result[OTHER_TENANT] = max(0.0, 1.0 - sum(named.values()))
            return result
        result = dict.fromkeys(self.labeled, 0.0)
        for tenant in self.tenants:
            label = tenant if tenant in self.labeled else OTHER_TENANT
            result[label] += 1 / len(self.tenants)
        return result


@dataclass
class Snapshot:
    """Everything one scrape read, at database time ``now``."""

    now: datetime
    queues: dict[str, QueueSnapshot]


def read_snapshot(
    conn: psycopg.Connection,
    limits: ExporterSettings,
    declared: Callable[[str], Iterable[str]] = lambda _queue: (),
) -> Snapshot:
    """Run the exporter's statements in one read-only, repeatable-read transaction.

    ``declared(queue)`` names the tenants of ``queue`` that always keep their own label.
    """
    params: dict[str, Any] = {
        "max_levels": limits.max_priority_levels,
        "count_limit": limits.count_limit,
        "max_tenant_levels": limits.max_tenant_levels,
        "near_seconds": limits.near_expiry_seconds,
        "timeout_ms": str(int(limits.statement_timeout_seconds * 1000)),
    }
    with conn.transaction():
        with operation("exporter_snapshot_begin"):
            conn.execute(QUERIES["exporter_transaction_setup"])
            conn.execute(QUERIES["exporter_transaction_limits"], params)
        now = _rows(conn, "exporter_now", params)[0][0]
        queues: dict[str, QueueSnapshot] = {}

        def queue_of(name: str) -> QueueSnapshot:
            return queues.setdefault(name, QueueSnapshot())

        for name, _priority, oldest, claimable in _rows(conn, "exporter_queue_levels", params):
            queue = queue_of(name)
            queue.claimable += claimable
            queue.oldest_available_at = _older(queue.oldest_available_at, oldest)
        for name, tenant, oldest in _rows(conn, "exporter_tenant_oldest", params):
            queue_of(name).tenants[tenant] = TenantRow(oldest)
        for name, tenant, running, near, expired in _rows(conn, "exporter_running", params):
            queue = queue_of(name)
            queue.running += running
            queue.near_expiry += near
            queue.expired += expired
            queue.tenants.setdefault(tenant, TenantRow()).running += running
        for name, dead, oldest_dead in _rows(conn, "exporter_dead", params):
            queue = queue_of(name)
            queue.dead, queue.oldest_dead_at = dead, oldest_dead
        for name, blocked, gap_waiting, oldest_gap in _rows(conn, "exporter_aggregates", params):
            queue = queue_of(name)
            queue.blocked_aggregates, queue.gap_waiting_aggregates = blocked, gap_waiting
            queue.oldest_gap_since = oldest_gap
        for name, tenants, weight in _rows(conn, "exporter_active_weights", params):
            queue = queue_of(name)
            queue.active_tenants, queue.active_weight = tenants, weight
        _throttle(conn, queues)
        keys: list[tuple[str, str]] = []
        for name, queue in queues.items():
            queue.labeled = bound_tenants(queue.tenants, top=limits.top_tenants, declared=declared(name))
            keys += [(name, tenant) for tenant in queue.labeled if tenant != OTHER_TENANT]
        lookup = {"queues": [k[0] for k in keys], "tenants": [k[1] for k in keys]}
        for name, tenant, weight, active, claimed in _rows(conn, "exporter_tenant_shares", lookup):
            queues[name].shares[tenant] = TenantShare(weight, active, claimed)
    return Snapshot(now=now, queues=queues)


def _throttle(conn: psycopg.Connection, queues: Mapping[str, QueueSnapshot]) -> None:
    """Mark the tenants with claimable work that a policy of their queue's stack holds
    back now (its level below one job; one level read per such tenant and policy:
    O(tenants)); nothing without such policies."""
    found = throttles()
    if not found:
        return
    lookup = {"policies": [p for p, _t in found], "functions": [level_signature(t) for _p, t in found]}
    limited: dict[str, list[str]] = {}
    for name, policy in _rows(conn, "exporter_throttle_queues", lookup):
        if name in queues:
            limited.setdefault(policy, []).append(name)
    for policy, throttle in found:
        keys = [
            (q, t)
            for q in limited.get(policy, [])
            for t, row in queues[q].tenants.items()
            if row.oldest_available_at
        ]
        if not keys:
            continue
        pairs = {"queues": [q for q, _t in keys], "tenants": [t for _q, t in keys]}
        with operation("exporter_tenant_throttled"):
            rows = conn.execute(level_query(QUERIES["exporter_tenant_throttled"], throttle), pairs).fetchall()
        for name, tenant in rows:
            queues[name].tenants[tenant].throttle()


def _rows(conn: psycopg.Connection, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    with operation(name):
        return conn.execute(QUERIES[name], params).fetchall()


def _older(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return a or b
    return min(a, b)


def bound_tenants(
    tenants: Mapping[str, TenantRow], *, top: int, declared: Iterable[str]
) -> dict[str, TenantRow]:
    """Keep ``top`` tenants (oldest claimable work first, then throttled tenants' oldest,
    then most running) and the declared ones under their own name; sum every other tenant
    into ``"other"``.

    The result always has an ``"other"`` row, so the series never vanishes.

    >>> rows = {"a": TenantRow(None, 3), "b": TenantRow(None, 1), "c": TenantRow(None, 2)}
    >>> sorted((k, v.running) for k, v in bound_tenants(rows, top=1, declared=["b"]).items())
    [('a', 3), ('b', 1), ('other', 2)]
    """
    keep = set(declared) - {OTHER_TENANT}

    def rank(item: tuple[str, TenantRow]) -> tuple[int, datetime | float, int, str]:
        name, row = item
        if row.oldest_available_at is not None:
            return (0, row.oldest_available_at, -row.running, name)
        if row.throttled_available_at is not None:
            return (1, row.throttled_available_at, -row.running, name)
        return (2, float(-row.running), 0, name)

    ranked = sorted(((n, r) for n, r in tenants.items() if n not in keep), key=rank)
    keep.update(name for name, _row in ranked[:top])
    bounded: dict[str, TenantRow] = {name: TenantRow() for name in keep}
    bounded.setdefault(OTHER_TENANT, TenantRow())
    for name, row in tenants.items():
        bounded[name if name in keep else OTHER_TENANT].merge(row)
    return bounded


def declared_tenants(settings: Settings) -> Callable[[str], set[str]]:
    """The tenants of a queue named in the configuration, globally or for that queue."""
    common = set(settings.tenants)

    def of(queue: str) -> set[str]:
        configured = settings.queues.get(queue)
        return common | set(configured.tenants) if configured else common

    return of
