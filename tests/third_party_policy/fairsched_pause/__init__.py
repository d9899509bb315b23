"""pause: hold a queue's tenants back by name, and count each tenant's finished jobs.

A third-party fairsched policy, shipped as its own distribution
(``fairsched-pause-policy``) under the entry-point group ``fairsched.policies``; it
uses the public interface (:mod:`fairsched.policy`) only:

- a **claim filter**: jobs of a tenant listed in ``fairsched_pause.paused`` for their
  queue are not claimable, unless the queue's ``policy_params`` say
  ``"pause_enabled": false`` (the switch for the whole list, read from ``q.params``);
- an **on_finish hook**: each job that leaves ``running`` for good is counted in
  ``fairsched_pause.finished`` by queue, tenant and final status, in the finishing
  transaction.

Its schema is its migrations' (``fairsched migrate`` applies them after the engine's);
``fairsched policy uninstall pause`` drops it. Pausing is a row::

    INSERT INTO fairsched_pause.paused (queue_name, tenant) VALUES ('emails', 'acme');

>>> Pause().claim_filter().as_string(None).startswith("(SELECT q.params")
True
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from importlib.resources.abc import Traversable

import psycopg
from psycopg import sql

from fairsched.policy import BasePolicy

PARAM = "pause_enabled"
"""The queue's ``policy_params`` key that turns pausing off when ``false``."""

# Per candidate: the switch from the claim's queue row, then a probe of the paused
# list's primary key (queue_name, tenant).
_FILTER = sql.SQL("""(SELECT q.params -> {param} FROM q) = 'false'::jsonb
            OR NOT EXISTS (SELECT FROM fairsched_pause.paused AS p
                            WHERE p.queue_name = j.queue_name AND p.tenant = j.tenant)""").format(
    param=sql.Literal(PARAM)
)

# The jobs that left running for good, counted per tenant and status; rows taken in
# (tenant, status) order, so concurrent finishers lock them in one order.
_FINISHED_COUNT = sql.SQL("""INSERT INTO fairsched_pause.finished AS f
       (queue_name, tenant, status, jobs, last_finished_at)
SELECT j.queue_name, j.tenant, j.status, count(*), now()
  FROM fairsched.jobs AS j
 WHERE j.id = ANY (%(ids)s) AND j.queue_name = %(queue)s
   AND j.status IN ('succeeded', 'dead', 'discarded')
 GROUP BY j.queue_name, j.tenant, j.status
 ORDER BY j.tenant, j.status
ON CONFLICT (queue_name, tenant, status) DO UPDATE
   SET jobs = f.jobs + excluded.jobs, last_finished_at = excluded.last_finished_at""")


class Pause(BasePolicy):
    """Paused tenants are not claimed; finished jobs are counted per tenant."""

    name = "pause"

    def migrations(self) -> Traversable:
        return files(__name__) / "migrations"

    def claim_filter(self) -> sql.Composable:
        return _FILTER

    def on_finish(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        conn.execute(_FINISHED_COUNT, {"ids": list(job_ids), "queue": queue})
