"""A third-party policy, installed only by putting this folder on ``sys.path``: jobs whose
payload says ``{"hold": true}`` are not claimable, and every finished job is logged."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

from fairsched.policy import BasePolicy


class Hold(BasePolicy):
    """Restricts claimability and keeps state at completion, without touching the engine."""

    name = "hold"

    def claim_filter(self) -> sql.Composable:
        return sql.SQL("NOT (j.payload @> {}::jsonb)").format(sql.Literal('{"hold": true}'))

    def on_finish(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        conn.execute(
            "INSERT INTO public.hold_log (queue, job_id) SELECT %s, unnest(%s::bigint[])",
            (queue, list(job_ids)),
        )
