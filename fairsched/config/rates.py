"""Rates of the ratelimit policy between settings and the database.

A rate (``"50/s"``; see :mod:`fairsched_policies.ratelimit`) is a queue's default for
its tenants (``rate`` of ``[queues.<q>]``) or a tenant's own (``rate`` of
``[queues.<q>.tenants.<t>]``, or of a top-level ``[tenants.<t>]`` for every queue whose
stack has ratelimit and that does not list the tenant itself). Rates shape claims only
through the ratelimit policy, so they are refused on a queue whose stack lacks it.

Unlike weights, the file is the whole truth about rates: ``config apply`` removes the
rates a queue of the file no longer gives. Declaring a queue through the API writes
the rates it was given and leaves the others alone. The rates live in the policy's
table ``fairsched.ratelimits``, which exists once ``fairsched migrate`` ran the policy's
migrations; without it there are no rates to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fairsched_policies.ratelimit as ratelimit
import psycopg

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import MAX_TENANT_CHARS, check_label, check_queue_name
from fairsched.errors import InvalidInput, NotMigrated, UnknownQueue
from fairsched.settings import RATELIMIT, QueueSettings, Settings, TenantSettings


@dataclass(frozen=True)
class QueueRates:
    """One queue's rates as ``"N/u"`` strings: its default and tenants' own (``None``:
    the tenant follows the default)."""

    default: str | None = None
    tenants: Mapping[str, str | None] = field(default_factory=dict)


def present(conn: psycopg.Connection) -> bool:
    """Whether ``fairsched.ratelimits`` exists (the ratelimit policy's migrations ran)."""
    with operation("configsync_ratelimits_present"):
        row = conn.execute(QUERIES["configsync_ratelimits_present"]).fetchone()
    return bool(row and row[0])


def _missing() -> NotMigrated:
    return NotMigrated(
        "the ratelimit policy's table fairsched.ratelimits is missing: run `fairsched migrate`"
    )


def stored_rates(conn: psycopg.Connection) -> dict[str, QueueRates]:
    """Every queue's stored rates (none when the policy's table does not exist)."""
    return _read(conn) if present(conn) else {}


def _read(conn: psycopg.Connection) -> dict[str, QueueRates]:
    with operation("configsync_rates"):
        rows = conn.execute(QUERIES["configsync_rates"]).fetchall()
    defaults: dict[str, str | None] = {}
    tenants: dict[str, dict[str, str | None]] = {}
    for queue, tenant, jobs, period in rows:
        text = str(ratelimit.Rate(jobs, int(period)))
        if tenant == ratelimit.DEFAULT:
            defaults[queue] = text
        else:
            tenants.setdefault(queue, {})[tenant] = text
    return {q: QueueRates(defaults.get(q), tenants.get(q, {})) for q in defaults.keys() | tenants.keys()}


def with_rates(conn: psycopg.Connection, queues: dict[str, QueueSettings]) -> dict[str, QueueSettings]:
    """``queues`` (as the database stores them) with the rates of those whose stack has
    ratelimit; a tenant with only a rate joins ``tenants`` with the default weight."""
    stored = stored_rates(conn) if any(RATELIMIT in q.policies for q in queues.values()) else {}
    for name, queue in queues.items():
        found = stored.get(name)
        if found is None or RATELIMIT not in queue.policies:
            continue
        tenants = dict(queue.tenants)
        for tenant, rate in found.tenants.items():
            tenants[tenant] = tenants.get(tenant, TenantSettings()).model_copy(update={"rate": rate})
        update: dict[str, Any] = {"tenants": tenants}
        if found.default is not None:
            update["rate"] = found.default
        queues[name] = queue.model_copy(update=update)
    return queues


def given_rates(queue: QueueSettings) -> QueueRates | None:
    """The rates a queue's settings were given explicitly (``rate = "off"`` included),
    or ``None`` when none: what declaring the queue writes."""
    default = queue.rate if "rate" in queue.model_fields_set else None
    tenants = {t: s.rate for t, s in queue.tenants.items() if "rate" in s.model_fields_set}
    if "rate" not in queue.model_fields_set and not tenants:
        return None
    return QueueRates(default, tenants)


def file_rates(settings: Settings, queue: QueueSettings) -> QueueRates:
    """Every rate a file gives one queue: the queue's own tenants' over the top-level
    ones (none when its stack has no ratelimit)."""
    if RATELIMIT not in queue.policies:
        return QueueRates()
    inherited = {t: s.rate for t, s in settings.tenants.items() if s.rate and t not in queue.tenants}
    own = {t: s.rate for t, s in queue.tenants.items() if s.rate}
    return QueueRates(queue.rate, inherited | own)


def rates_declare(conn: psycopg.Connection, queues: Mapping[str, QueueSettings]) -> None:
    """Write the rates the queues were given explicitly (see :func:`given_rates`),
    leaving their other rates as they are; inside the caller's transaction."""
    wanted = {name: r for name, q in queues.items() if (r := given_rates(q)) is not None}
    if wanted:
        _write(conn, wanted, exact=False)


def rates_apply(conn: psycopg.Connection, settings: Settings) -> None:
    """Make the rates of every queue of the file what the file gives (``config apply``):
    write the new ones, remove those it no longer gives; inside the caller's transaction."""
    _write(conn, {name: file_rates(settings, q) for name, q in settings.queues.items()}, exact=True)


def _write(conn: psycopg.Connection, wanted: Mapping[str, QueueRates], *, exact: bool) -> None:
    """Write what differs from the stored rates; with ``exact``, also remove the rates of
    these queues that ``wanted`` does not give."""
    if not present(conn):
        if any(w.default or any(w.tenants.values()) for w in wanted.values()):
            raise _missing()
        return
    stored = _read(conn)
    with operation("configsync_rates_write"):
        for queue, want in sorted(wanted.items()):
            have = stored.get(queue, QueueRates())
            if want.default != have.default:
                ratelimit.rate_set(conn, queue, None, rate_parsed(want.default))
            for tenant in sorted(set(want.tenants) | (set(have.tenants) if exact else set())):
                rate = want.tenants.get(tenant)
                if rate != have.tenants.get(tenant):
                    ratelimit.rate_set(conn, queue, tenant, rate_parsed(rate))


# -- live changes ------------------------------------------------------------------


def rate_parsed(rate: str | None) -> ratelimit.Rate | None:
    """A rate from ``"N/s"`` … or ``None`` for ``None`` / ``"off"``; :class:`InvalidInput`
    for anything else."""
    return None if rate is None else ratelimit.parse_rate(rate)


def rate_change(
    conn: psycopg.Connection, queue: str, tenant: str | None, rate: str | None
) -> ratelimit.Rate | None:
    """Set a tenant's rate (``tenant=None``: the queue's default) from ``"N/s"`` … or
    remove it (``None`` or ``"off"``) and wake the queue's claimers; the next claim
    follows it. Returns the rate now set. Refuses unknown queues and queues whose stack
    has no ratelimit, changing nothing."""
    check_queue_name(queue)
    if tenant is not None:
        check_label("tenant", tenant, MAX_TENANT_CHARS)
    parsed = rate_parsed(rate)
    with conn.transaction():
        with operation("configsync_queue_policies"):
            row = conn.execute(QUERIES["configsync_queue_policies"], {"name": queue}).fetchone()
        if row is None:
            raise UnknownQueue(queue)
        if RATELIMIT not in row[0]:
            raise InvalidInput(
                f"queue {queue}'s policy stack [{', '.join(row[0])}] has no ratelimit, so a rate "
                f"would not shape its claims: add ratelimit to its policies first"
            )
        if not present(conn):
            raise _missing()
        with operation("ratelimit_set"):
            ratelimit.rate_set(conn, queue, tenant, parsed)
        conn.execute(QUERIES["configsync_queue_notify"], {"name": queue})
    return parsed


def tenant_rate(conn: psycopg.Connection, stored: QueueSettings, queue: str, tenant: str) -> dict[str, Any]:
    """A tenant's rate, its queue's default and the jobs it may start now (``tenant
    show``), or nothing when the queue's stack has no ratelimit."""
    if RATELIMIT not in stored.policies:
        return {}
    own = stored.tenants.get(tenant)
    budget = None
    if present(conn):
        with operation("configsync_tenant_budget"):
            row = conn.execute(QUERIES["configsync_tenant_budget"], {"queue": queue, "tenant": tenant})
            budget = (row.fetchone() or (None,))[0]
    return {
        "rate": own.rate if own else None,
        "queue_rate": stored.rate,
        "rate_budget": budget,
        "throttled": budget is not None and budget < 1,
    }
