"""What ``fairsched status`` and ``fairsched top`` show: queues, tenants, shares, dead, blocked.

One read is the exporter's snapshot (:func:`fairsched.observe.snapshot.read_snapshot`,
bounded per-scrape statements) plus the queues' stacks, the share denominators (one
pass over the share rows) and the longest-blocked aggregates among at most
:data:`BLOCKED_READ` per queue: O(queues + tenants), never O(jobs). Tenants per queue
are bounded the way the exporter bounds them: the tenants with the oldest claimable
work (and the configured ones) by name, the rest summed up as ``other``.

A tenant a policy of its queue's stack holds back on its own limit (e.g. a rate limit's
budget below one job) is *throttled*: its oldest claimable wait is reported apart and it
is not counted as starving.

Shares: ``entitled`` is a tenant's weight over the weights of the active
tenants (an equal split without the weighted policy); ``share`` is its part of
the claims counted by the weighted policy — since the share row exists in
``status``, over the last refresh interval in ``top`` (:func:`interval_shares`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import class_row, dict_row

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.dead import BlockedAggregate
from fairsched.errors import InvalidInput
from fairsched.metrics import OTHER_TENANT
from fairsched.observe.snapshot import ExporterSettings, declared_tenants, read_snapshot
from fairsched.policy.owned import level_query, level_signature, throttles
from fairsched.settings import Settings

BLOCKED_SHOWN = 20
"""Blocked aggregates listed by ``status`` (the count per queue is always complete)."""
BLOCKED_READ = 1000
"""Blocked aggregates read per queue to choose the longest-blocked ones listed."""


@dataclass
class TenantStatus:
    """One tenant (or ``other``) of a queue."""

    tenant: str
    weight: float | None
    running: int
    oldest_claimable_age_seconds: float
    claimed_total: int | None
    share: float | None
    entitled: float
    throttled: bool = False
    """A policy holds it back on its own limit (a rate limit): its wait is that limit's."""
    throttled_oldest_age_seconds: float = 0.0
    """The oldest claimable job's age while throttled (then not in the one above)."""


@dataclass
class QueueStatus:
    """One queue."""

    name: str
    policies: list[str]
    claimable: int
    running: int
    oldest_claimable_age_seconds: float
    dead: int
    oldest_dead_age_seconds: float
    blocked_aggregates: int
    gap_waiting_aggregates: int
    starving_tenants: int
    claimed_total: int
    throttled_tenants: int = 0
    tenants: list[TenantStatus] = field(default_factory=list)


@dataclass
class Status:
    """Everything one ``status`` read found, at database time ``now``."""

    now: datetime
    starving_after_seconds: float
    queues: list[QueueStatus]
    blocked: list[BlockedAggregate]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def read_status(conn: psycopg.Connection, settings: Settings, limits: ExporterSettings) -> Status:
    """Read the status of every declared queue."""
    snapshot = read_snapshot(conn, limits, declared_tenants(settings))
    with operation("status_read"), conn.cursor(row_factory=dict_row) as cur:
        stacks = cur.execute(QUERIES["status_queues"]).fetchall()
        totals = {r["queue_name"]: r for r in cur.execute(QUERIES["status_share_totals"]).fetchall()}
    with operation("status_blocked"), conn.cursor(row_factory=class_row(BlockedAggregate)) as cur:
        blocked = cur.execute(
            QUERIES["status_blocked"], {"shown": BLOCKED_SHOWN, "read_limit": BLOCKED_READ}
        ).fetchall()
    now = snapshot.now
    queues = []
    for stack in stacks:
        name = stack["name"]
        snap = snapshot.queues.get(name)
        if snap is None:
            continue
        total = int(totals[name]["claimed"]) if name in totals else 0
        entitled = snap.entitled_shares()
        tenants = []
        for tenant, row in sorted(snap.labeled.items(), key=lambda kv: (kv[0] == OTHER_TENANT, kv[0])):
            share = snap.shares.get(tenant)
            idle = row.running == 0 and row.oldest_available_at is None and row.throttled_available_at is None
            if tenant == OTHER_TENANT and idle:
                continue
            tenants.append(
                TenantStatus(
                    tenant=tenant,
                    weight=share.weight if share else None,
                    running=row.running,
                    oldest_claimable_age_seconds=_age(now, row.oldest_available_at),
                    claimed_total=share.claimed_total if share else None,
                    share=(share.claimed_total / total) if share and total else None,
                    entitled=entitled.get(tenant, 0.0),
                    throttled=row.throttled_available_at is not None,
                    throttled_oldest_age_seconds=_age(now, row.throttled_available_at),
                )
            )
        starving = sum(
            1
            for t in snap.tenants.values()
            if _age(now, t.oldest_available_at) >= limits.starving_after_seconds
        )
        queues.append(
            QueueStatus(
                name=name,
                policies=list(stack["policies"]),
                claimable=snap.claimable,
                running=snap.running,
                oldest_claimable_age_seconds=_age(now, snap.oldest_available_at),
                dead=snap.dead,
                oldest_dead_age_seconds=_age(now, snap.oldest_dead_at),
                blocked_aggregates=snap.blocked_aggregates,
                gap_waiting_aggregates=snap.gap_waiting_aggregates,
                starving_tenants=starving,
                claimed_total=total,
                tenants=tenants,
                throttled_tenants=sum(1 for t in snap.tenants.values() if t.throttled_available_at),
            )
        )
    return Status(now, limits.starving_after_seconds, queues, blocked)


def interval_shares(before: Status | None, after: Status) -> dict[tuple[str, str], float]:
    """Each named tenant's part of the claims made between two reads, per (queue, tenant)."""
    if before is None:
        return {}
    old = {(q.name, t.tenant): t.claimed_total or 0 for q in before.queues for t in q.tenants}
    deltas: dict[tuple[str, str], int] = {}
    for queue in after.queues:
        for tenant in queue.tenants:
            if tenant.claimed_total is not None:
                key = (queue.name, tenant.tenant)
                deltas[key] = max(0, tenant.claimed_total - old.get(key, 0))
    sums: dict[str, int] = {}
    for (queue_name, _tenant), n in deltas.items():
        sums[queue_name] = sums.get(queue_name, 0) + n
    return {key: n / sums[key[0]] for key, n in deltas.items() if sums[key[0]]}


def _age(now: datetime, then: datetime | None) -> float:
    return max((now - then).total_seconds(), 0.0) if then is not None else 0.0


# -- one tenant -------------------------------------------------------------------


def tenant_jobs(
    conn: psycopg.Connection, queue: str, tenant: str, limits: ExporterSettings
) -> dict[str, Any]:
    """One tenant's job counts on a queue (each up to ``limits.count_limit``) and its
    oldest claimable job's age in seconds; index walks over its own priority levels."""
    params = {
        "queue": queue,
        "tenant": tenant,
        "count_limit": limits.count_limit,
        "max_levels": limits.max_priority_levels,
    }
    with operation("status_tenant"), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(QUERIES["status_tenant"], params).fetchone()
    assert row is not None
    now, oldest = row.pop("now"), row.pop("oldest_available_at")
    row["oldest_claimable_age_seconds"] = _age(now, oldest)
    return dict(row)


def tenant_levels(
    conn: psycopg.Connection, policies: Sequence[str], queue: str, tenant: str
) -> dict[str, Any]:
    """How many jobs each policy of the stack that reports throttled tenants lets the
    tenant start now (under the policy's name for it; ``None``: no limit, or the policy's
    migrations did not run) and whether one holds it back (``throttled``); nothing when
    no policy of the stack reports throttled tenants."""
    shown: dict[str, Any] = {}
    for _policy, throttle in throttles(policies):
        level = None
        with operation("configsync_tenant_level"):
            found = conn.execute(QUERIES["configsync_level_present"], {"function": level_signature(throttle)})
            if (found.fetchone() or (False,))[0]:
                row = conn.execute(
                    level_query(QUERIES["configsync_tenant_level"], throttle),
                    {"queue": queue, "tenant": tenant},
                )
                level = (row.fetchone() or (None,))[0]
        shown[throttle.shown_as] = level
    if not shown:
        return {}
    return shown | {"throttled": any(v is not None and v < 1 for v in shown.values())}


def tenant_share(conn: psycopg.Connection, queue: str, tenant: str) -> dict[str, Any] | None:
    """One tenant's share state on a queue (one primary key lookup), None without one."""
    with operation("status_tenant_share"), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(QUERIES["status_tenant_share"], {"queue": queue, "tenant": tenant}).fetchone()


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNITS: Mapping[str, float] = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_span(text: str) -> timedelta:
    """``90s``, ``15m``, ``2h``, ``1.5d`` → a duration.

    >>> parse_span("15m")
    datetime.timedelta(seconds=900)
    """
    match = _SPAN.match(text)
    if match is None:
        raise InvalidInput(f"{text!r} is not a duration: use a number and s, m, h or d, e.g. 15m")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: a duration back from ``now`` (``2h``) or an ISO 8601 time with a zone."""
    if _SPAN.match(text):
        return now - parse_span(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"--since {text!r}: give a duration (e.g. 2h) or an ISO 8601 time") from None
    if when.tzinfo is None:
        raise InvalidInput(f"--since {text!r} has no time zone: add one, e.g. {text}+00:00")
    return when
