"""What the commands print as tables: rich renderables built from the engine's records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table


def when(value: datetime | None) -> str:
    """A timestamp to the second, or - when there is none."""
    return value.isoformat(sep=" ", timespec="seconds") if value else "-"


def number(value: float) -> str:
    """A weight or a setting, without trailing zeros."""
    return f"{value:g}"


def percent(value: float | None) -> str:
    """A share as a percentage, or - when unknown."""
    return "-" if value is None else f"{100 * value:.1f}%"


def seconds(value: float) -> str:
    """An age in seconds, or - for none."""
    return f"{value:.1f}s" if value else "-"


def setting(value: Any) -> str:
    """A queue setting as policy show prints it."""
    if value is None:
        return "none"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return number(value)
    if isinstance(value, dict):
        return json.dumps(value) if value else "-"
    return str(value)


def dead_table(jobs: Sequence[Any]) -> Table:
    """Dead jobs: one row each, the first line of the last error."""
    table = Table("id", "queue", "tenant", "attempts", "error code", "error", "died at")
    for job in jobs:
        error = (job.last_error or "").splitlines()[0][:60] if job.last_error else "-"
        table.add_row(
            str(job.id),
            job.queue_name,
            job.tenant,
            str(job.attempt_count),
            job.last_error_code or "-",
            error,
            when(job.finished_at),
        )
    return table


def job_tables(job: dict[str, Any]) -> tuple[Table, Table]:
    """A job's fields (payload as JSON), then its history."""
    fields = Table("field", "value", show_header=False)
    for key, value in job.items():
        if key == "history":
            continue
        shown = json.dumps(value, ensure_ascii=False) if key == "payload" else value
        fields.add_row(key, when(shown) if isinstance(shown, datetime) else str(shown))
    events = Table("at", "kind", "detail", title="history")
    for entry in job["history"]:
        events.add_row(when(entry["at"]), entry["kind"], json.dumps(entry["detail"], ensure_ascii=False))
    return fields, events


def tenant_table(queue: str, rows: Sequence[dict[str, Any]]) -> Table:
    """Tenants of a queue: weight, effective cap, running, claims, share and entitled share."""
    table = Table("tenant", "weight", "cap", "running", "active", "claimed", "share", "entitled", title=queue)
    for r in rows:
        cap = r["effective_cap"]
        shown_cap = "-" if cap is None else (str(cap) if r["cap"] else f"{cap} (queue)")
        table.add_row(
            r["tenant"],
            number(r["weight"]),
            shown_cap,
            str(r["running"]),
            "yes" if r["active"] else "no",
            str(r["claimed_total"]),
            percent(r["share"]),
            percent(r["entitled"]),
        )
    return table


def fields_table(shown: dict[str, Any]) -> Table:
    """Field and value, without a header."""
    table = Table("field", "value", show_header=False)
    for key, value in shown.items():
        table.add_row(
            key, "-" if value is None else number(value) if isinstance(value, float) else str(value)
        )
    return table


def policy_table(queue: str, values: dict[str, Any], tenants: dict[str, dict[str, Any]]) -> Table:
    """A queue's stored settings, then its tenants' weights, caps and the values of the
    settings their policies own (rates)."""
    table = Table("setting", "value", title=queue, show_header=False)
    for key, value in values.items():
        table.add_row(key, setting(value))
    for name, share in tenants.items():
        cap = share["cap"] if share["cap"] is not None else "none"
        owned = "".join(
            f", {k} {v}" for k, v in share.items() if k not in ("weight", "cap") and v is not None
        )
        table.add_row(f"tenants.{name}", f"weight {number(share['weight'])}, cap {cap}{owned}")
    return table


def blocked_table(blocked: Sequence[Any], *, since: str = "blocked since", title: str | None = None) -> Table:
    """Aggregates blocked by a dead job."""
    table = Table("queue", "tenant", "aggregate", "dead job", since, title=title)
    for b in blocked:
        table.add_row(b.queue_name, b.tenant, b.aggregate_key, str(b.blocked_job_id), when(b.since))
    return table


def grants_table(grants: Sequence[Any]) -> Table:
    """Producer tenant grants (:class:`fairsched.config.producers.TenantGrant`)."""
    table = Table("role", "tenant", "granted at", title="producer tenant grants")
    for g in grants:
        table.add_row(g.role, g.pattern, when(g.granted_at))
    return table


def status_view(report: Any, recent: dict[tuple[str, str], float], interval: float | None = None) -> Group:
    """The status tables: queues, then each queue's tenants, then blocked aggregates.

    A throttled tenant (out of its rate limit's budget) shows its oldest claimable
    wait under "throttled", not "oldest claimable", and is not counted as starving.

    Without ``interval`` the share is the report's (since the share rows exist); with
    it, ``recent``'s: each tenant's part of the claims of the last interval.
    """
    stamp = report.now.isoformat(sep=" ", timespec="seconds")
    queues = Table(
        "queue",
        "policies",
        "claimable",
        "running",
        "oldest claimable",
        "dead",
        "blocked",
        "starving",
        "throttled",
        title=f"fairsched status at {stamp}",
    )
    parts: list[Any] = [queues]
    for q in report.queues:
        queues.add_row(
            q.name,
            ",".join(q.policies),
            str(q.claimable),
            str(q.running),
            seconds(q.oldest_claimable_age_seconds),
            str(q.dead),
            str(q.blocked_aggregates),
            str(q.starving_tenants),
            str(q.throttled_tenants),
        )
        if not q.tenants:
            continue
        share_title = f"share (last {interval:g}s)" if interval is not None else "share"
        tenants = Table(
            "tenant",
            "weight",
            "running",
            "oldest claimable",
            "throttled",
            share_title,
            "entitled",
            title=q.name,
        )
        for t in q.tenants:
            share = recent.get((q.name, t.tenant)) if interval is not None else t.share
            tenants.add_row(
                t.tenant,
                "-" if t.weight is None else number(t.weight),
                str(t.running),
                seconds(t.oldest_claimable_age_seconds),
                f"yes ({t.throttled_oldest_age_seconds:.1f}s)" if t.throttled else "-",
                percent(share),
                percent(t.entitled),
            )
        parts.append(tenants)
    if report.blocked:
        parts.append(blocked_table(report.blocked, since="since", title="blocked aggregates"))
    return Group(*parts)


def simulation_view(outcomes: dict[str, Any], plans: dict[str, Any]) -> Group:
    """Per tenant: weight, share, p50/p99 wait and starvation, one column group per setting."""
    names = list(outcomes)
    first = plans[names[0]]
    lines = [
        f"{len(first.arrivals)} jobs over {first.horizon:g}s (virtual); starving: claimable > "
        f"{first.starving_after:g}s"
    ]
    for name in names:
        plan = plans[name]
        lines.append(f"{name}: policies {','.join(plan.queue.policies)}, {plan.slots} slots")
    table = Table("tenant", title="simulated")
    for name in names:
        for column in ("weight", "share", "p50 wait", "p99 wait", "starved"):
            table.add_column(f"{column}\n{name}", justify="right")
    tenants = sorted({t for o in outcomes.values() for t in o.tenants})
    for tenant in tenants:
        row = [tenant]
        for name in names:
            figures = outcomes[name].tenants[tenant]
            weight = plans[name].queue.tenants.get(tenant)
            row += [
                number(weight.weight if weight else 1.0),
                percent(figures.share),
                f"{figures.p50_wait:.2f}s",
                f"{figures.p99_wait:.2f}s",
                f"{figures.starved_seconds:.1f}s ({figures.late} jobs)",
            ]
        table.add_row(*row)
    return Group(*lines, table)
