"""What the pages show, read through :mod:`fairsched.observe` and the client's operations.

Every read is bounded: the status and snapshot reads cost O(queues + tenants), the
tenant table is sorted and cut into pages in memory over the queue's tenants, lists of
dead jobs and starving tenants stop at a limit. No page reads O(jobs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg.rows import class_row

from fairsched.config import sync as configsync
from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine import dead, enqueue
from fairsched.engine.workers import QueueWorkers, workers_by_queue
from fairsched.observe.snapshot import ExporterSettings, QueueSnapshot, read_snapshot
from fairsched.observe.status import Status, read_status
from fairsched.policy import registry as policy
from fairsched.policy.owned import owned_effective, owned_value, stack_settings
from fairsched.settings import QueueSettings, Settings

PAGE_SIZE = 50
"""Tenants per page of the queue page."""
CHART_TENANTS = 8
"""Tenants drawn on the share chart (the largest entitled shares); the rest is ``other``."""
STARVING_SHOWN = 200
"""Starving (and throttled) tenants listed, oldest first."""
SORTS = ("tenant", "weight", "cap", "running", "share", "entitled", "oldest")
Sort = Literal["tenant", "weight", "cap", "running", "share", "entitled", "oldest"]


@dataclass
class Overview:
    """The overview page: ``status`` (running jobs included) plus, per queue, its live
    workers with their slots (the worker registry)."""

    status: Status
    workers: dict[str, QueueWorkers]


def overview(conn: psycopg.Connection, settings: Settings, limits: ExporterSettings) -> Overview:
    report = read_status(conn, settings, limits)
    return Overview(report, workers_by_queue(conn))


@dataclass
class TenantRow:
    """One tenant of the queue page."""

    tenant: str
    weight: float = 1.0
    cap: int | None = None
    running: int = 0
    claimed_total: int = 0
    share: float | None = None
    entitled: float = 0.0
    oldest_seconds: float = 0.0
    throttled: bool = False
    owned: dict[str, str | None] = field(default_factory=dict)
    """The values of the tenant settings its stack's policies own (a rate), the queue's
    default where it has none."""


@dataclass
class QueuePage:
    """The queue page: its stack and settings, one page of its tenants, the totals."""

    name: str
    stack: policy.QueueStack
    stored: QueueSettings
    snapshot: QueueSnapshot
    tenants: list[TenantRow]
    total_tenants: int
    page: int
    pages: int
    sort: Sort
    descending: bool
    oldest_seconds: float
    chart: list[str] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)
    """The queue's defaults of the tenant settings its stack's policies own (a default rate)."""
    queue_settings: dict[str, Any] = field(default_factory=dict)
    """The queue-only settings its stack's policies own (aging interval, charge, ...): the
    value given, else the policy's default."""
    tenant_settings: list[str] = field(default_factory=list)
    """The tenant settings its stack's policies own: a column each."""


def queue_page(
    conn: psycopg.Connection,
    name: str,
    limits: ExporterSettings,
    *,
    sort: Sort = "oldest",
    descending: bool = True,
    page: int = 1,
) -> QueuePage:
    """One queue; raises :class:`~fairsched.errors.UnknownQueue` when it is not declared."""
    enqueue.check_queue_name(name)
    stored = configsync.queue_settings(conn, name)
    stack = policy.queue_stack(conn, name)
    snap = read_snapshot(conn, limits).queues.get(name) or QueueSnapshot()
    now = database_now(conn)
    rows: dict[str, TenantRow] = {}
    shares = policy.tenant_shares_list(conn, name)
    claimed = sum(s.claimed_total for s in shares)
    active_weight = sum(s.weight for s in shares if s.active)
    for s in shares:
        rows[s.tenant] = TenantRow(
            s.tenant,
            weight=s.weight,
            cap=s.cap,
            running=s.running,
            claimed_total=s.claimed_total,
            share=s.claimed_total / claimed if claimed else None,
            entitled=s.weight / active_weight if s.active and active_weight else 0.0,
        )
    for tenant, seen in snap.tenants.items():
        row = rows.setdefault(tenant, TenantRow(tenant, running=seen.running))
        oldest = seen.oldest_available_at or seen.throttled_available_at
        row.oldest_seconds = _age(now, oldest)
        row.throttled = seen.throttled_available_at is not None
    if not active_weight and snap.tenants:  # no weighted state: an equal split
        for tenant in snap.tenants:
            rows[tenant].entitled = 1 / len(snap.tenants)
    ordered = sorted(rows.values(), key=lambda r: _sort_key(r, sort), reverse=descending)
    pages = max(1, -(-len(ordered) // PAGE_SIZE))
    page = min(max(page, 1), pages)
    shown = ordered[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    owned = stack_settings(stored.policies)
    defaults = {
        o.name: owned_value(stored, o.name) for o in owned if set(o.setting.levels) == {"queue", "tenant"}
    }
    queue_only = {o.name: owned_effective(stored, o.name) for o in owned if o.setting.levels == ("queue",)}
    columns = [o.name for o in owned if "tenant" in o.setting.levels]
    for row in shown:
        own = stored.tenants.get(row.tenant)
        row.owned = {c: _first(owned_value(own, c) if own else None, defaults.get(c)) for c in columns}
    chart = sorted((r for r in rows.values() if r.entitled > 0), key=lambda r: (-r.entitled, r.tenant))
    return QueuePage(
        name,
        stack,
        stored,
        snap,
        shown,
        len(ordered),
        page,
        pages,
        sort,
        descending,
        _age(now, snap.oldest_available_at),
        [r.tenant for r in chart[:CHART_TENANTS]],
        defaults,
        queue_only,
        columns,
    )


def _first(value: Any, default: Any) -> Any:
    return default if value is None else value


def _sort_key(row: TenantRow, sort: Sort) -> tuple[Any, str]:
    values: dict[str, Any] = {
        "tenant": row.tenant,
        "weight": row.weight,
        "cap": row.cap or 0,
        "running": row.running,
        "share": row.share or 0.0,
        "entitled": row.entitled,
        "oldest": row.oldest_seconds,
    }
    return (values[sort], row.tenant)


def shares_now(conn: psycopg.Connection, name: str, tenants: list[str]) -> dict[str, Any]:
    """The share chart's one sample: database time, each named tenant's claims so far and
    entitled share, and the queue's totals (``other`` is the rest): primary key lookups
    plus one pass over the share rows."""
    enqueue.check_queue_name(name)
    for tenant in tenants:
        enqueue.check_label("tenant", tenant, enqueue.MAX_TENANT_CHARS)
    lookup = {"queues": [name] * len(tenants), "tenants": tenants}
    with operation("web_shares"):
        now = database_now(conn)
        named = conn.execute(QUERIES["exporter_tenant_shares"], lookup).fetchall()
        totals = {r[0]: r for r in conn.execute(QUERIES["status_share_totals"]).fetchall()}
    _queue, claimed, weight = totals.get(name, (name, 0, 0.0))
    return {
        "at": now.timestamp(),
        "claimed": int(claimed or 0),
        "tenants": {
            tenant: {
                "claimed": int(total),
                "entitled": float(w) / float(weight) if active and weight else 0.0,
            }
            for _q, tenant, w, active, total in named
        },
    }


@dataclass
class Starving:
    """A tenant whose oldest claimable job waits longer than the threshold (or, when
    throttled, waits on its own rate limit)."""

    queue: str
    tenant: str
    oldest_seconds: float
    running: int


def starvation(
    conn: psycopg.Connection, limits: ExporterSettings
) -> tuple[list[Starving], list[Starving], int, int]:
    """Starving and throttled tenants over every queue, oldest first, each list cut at
    :data:`STARVING_SHOWN`; with the full counts of both."""
    snapshot = read_snapshot(conn, limits)
    starving, throttled = [], []
    for queue, snap in snapshot.queues.items():
        for tenant, row in snap.tenants.items():
            if row.throttled_available_at is not None:
                age = _age(snapshot.now, row.throttled_available_at)
                throttled.append(Starving(queue, tenant, age, row.running))
            elif row.oldest_available_at is not None:
                age = _age(snapshot.now, row.oldest_available_at)
                if age >= limits.starving_after_seconds:
                    starving.append(Starving(queue, tenant, age, row.running))
    starving.sort(key=lambda s: -s.oldest_seconds)
    throttled.sort(key=lambda s: -s.oldest_seconds)
    return starving[:STARVING_SHOWN], throttled[:STARVING_SHOWN], len(starving), len(throttled)


@dataclass(frozen=True)
class GapWait:
    """A serial aggregate waiting for a missing sequence number (gap mode strict)."""

    queue_name: str
    tenant: str
    aggregate_key: str
    next_seq: int
    gap_since: datetime


def gap_waits(conn: psycopg.Connection, shown: int) -> list[GapWait]:
    """The ``shown`` longest-waiting aggregates on a gap, over every queue."""
    with operation("web_aggregates_gap"), conn.cursor(row_factory=class_row(GapWait)) as cur:
        return cur.execute(QUERIES["web_aggregates_gap"], {"shown": shown}).fetchall()


def dead_newest(
    conn: psycopg.Connection,
    *,
    queue: str | None,
    tenant: str | None,
    code: str | None,
    since: datetime | None,
    limit: int,
) -> list[dead.DeadJob]:
    """The newest dead jobs; without a queue, each declared queue is read apart through
    its dead-jobs index and the lists merged, so no read walks every dead job."""
    queues = [queue] if queue is not None else [r[0] for r in conn.execute(QUERIES["status_queues"])]
    found: list[dead.DeadJob] = []
    for name in queues:
        found += dead.dead_list(conn, queue=name, tenant=tenant, code=code, since=since, limit=limit)
    found.sort(key=lambda j: (j.finished_at is not None, j.finished_at, j.id), reverse=True)
    return found[:limit]


def payload_preview(payload: Any, allowed: bool, limit: int = 4000) -> tuple[int, str]:
    """The payload's size in bytes (as stored JSON text) and a preview: its JSON cut at
    ``limit`` characters when ``allowed``, else its shape with every value redacted.

    >>> payload_preview({"to": "a@b", "n": [1, 2]}, allowed=False)
    (26, '{"to": "<str>", "n": ["<int>", "<int>"]}')
    """
    text = json.dumps(payload, ensure_ascii=False)
    size = len(text.encode())
    if allowed:
        return size, text[:limit] + (" …" if len(text) > limit else "")
    shape = json.dumps(_shape(payload, 0), ensure_ascii=False)
    return size, shape[:limit] + (" …" if len(shape) > limit else "")


def _shape(value: Any, depth: int) -> Any:
    if depth > 4:
        return "<…>"
    if isinstance(value, dict):
        return {_key(k): _shape(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list):
        return [_shape(v, depth + 1) for v in value[:10]]
    return f"<{type(value).__name__ if value is not None else 'null'}>"


def _key(key: str) -> str:
    return key if len(key) <= 40 else key[:40] + "…"


def database_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute(QUERIES["exporter_now"]).fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def _age(now: datetime, then: datetime | None) -> float:
    return max((now - then).total_seconds(), 0.0) if then is not None else 0.0
