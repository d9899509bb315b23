"""Helpers for the operator command tests: a snapshot of what the commands may change."""

from __future__ import annotations

from typing import Any

import psycopg


def config_state(db: psycopg.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Queues, tenant settings and jobs as rows, to assert a refused command changed nothing."""
    return {
        "queues": db.execute("SELECT * FROM fairsched.queues ORDER BY name").fetchall(),
        "tenants": db.execute(
            "SELECT queue_name, tenant, weight, cap, active FROM fairsched.tenant_shares ORDER BY 1, 2"
        ).fetchall(),
        "jobs": db.execute("SELECT id, status, available_at FROM fairsched.jobs ORDER BY id").fetchall(),
    }
